"""Fused GPU kernels (Triton language) for hot elementwise paths; every one has a torch fallback."""
