# The preamble of every tools/device_*.sh, sourced from the checkout root on the GPU machine with
# the devpack carried in .devpack/:   source tools/device_env.sh "$@"
# It takes OUT_DIR from $1 (as `out`, created), installs the devpack (unless a calling script has),
# makes this checkout importable by the Python-backend stubs, sets the common environment and
# defines the helpers below. An MPS daemon started with mps_start is quit on exit, however the
# script ends.
set -uo pipefail
out=${1:?usage: bash $0 OUT_DIR [ARGS...]}
mkdir -p "$out"
[ -n "${TRITONSERVER:-}" ] || source .devpack/devpack-install.sh .devpack || exit 1
python3 -c "import dns.asyncresolver" 2>/dev/null ||  # the gateway's DNS membership: `voxlane serve` imports it
  echo "devpack: no dnspython, so \`voxlane serve\` cannot start; add its wheel to .devpack/wheels (pip download --no-deps dnspython)"
echo "$PWD" > /tmp/site/voxlane-checkout.pth   # the stubs take sys.path from /tmp/stubenv's python3
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 VOXLANE_CACHE=${VOXLANE_CACHE:-/tmp/voxlane-cache}

# A GPU by UUID: an MPS daemon renumbers the GPUs it is given from 0, so an index would name
# another GPU (or none) for its clients.
gpu_uuid() { nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$1"; }

# mps_start DIR: our own MPS daemon (server/mps.py, pipe and log directories under DIR); then
# `env $mps_env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=P CMD` runs CMD as its client. mps_stop quits it.
mps_dir=
mps_env=
mps_start() { mps_env=$(python3 -m server.mps start "$1") && mps_dir=$1; }
mps_stop() { [ -z "$mps_dir" ] || python3 -m server.mps stop "$mps_dir"; mps_dir= mps_env=; }
trap mps_stop EXIT

# crashed_logs FILE...: the tritonserver logs that show a crash (a segfault or a fatal error).
crashed_logs() { grep -l -E "Signal \(11|Fatal" "$@" 2>/dev/null; true; }
