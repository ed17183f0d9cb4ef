# Read by the `bash -c` through which Triton's Python backend starts each stub process (BASH_ENV: see
# server/triton_launch.py): the stubs run with glibc's own malloc settings, not tritonserver's.
unset GLIBC_TUNABLES
