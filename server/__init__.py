"""Running VoxLane: the launcher (`voxlane serve`) and tritonserver's process, the MPS daemon, several
servers on one host, the model watch, the OpenAI-compatible gateway, and the tools that start servers to
measure them (`compare`, the GPU microbenchmarks). It may import every other package; none imports it."""
