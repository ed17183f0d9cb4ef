"""NVIDIA's perf_analyzer as a cross-check of `voxlane bench`: running it, feeding it a plan, reading its export."""
