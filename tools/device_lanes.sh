#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_lanes.sh OUT_DIR
# 1. the partition's effect: LM frame time and codec batch latency under our own MPS daemon
#    at the lane percentages vs 100 %; 2. the serving smoke in each mode; 3. voxlane compare.
set -uo pipefail
out=${1:?OUT_DIR}
source .devpack/devpack-install.sh .devpack || exit 1
echo "$PWD" > /tmp/site/voxlane-checkout.pth   # the stubs take sys.path from /tmp/stubenv's python3
export PYTHONUNBUFFERED=1 VOXLANE_CACHE=/tmp/voxlane-cache
model=qwen3-tts-1.7b

mps_env="CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log"
mkdir -p /tmp/mps-pipe /tmp/mps-log
env $mps_env nvidia-cuda-mps-control -d
for pct in 100 75; do
  env $mps_env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct timeout 150 \
    python3 -m clients.microbench.lm --model $model --batch-sizes 1 32 2>&1 | tail -6
done | tee "$out/lm_mps.txt"
for pct in 100 25; do
  env $mps_env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct timeout 90 \
    python3 -m clients.microbench.codec --model $model --batch-sizes 1 8 16 2>&1 | grep '^{'
done | tee "$out/codec_mps.jsonl"
echo quit | env $mps_env nvidia-cuda-mps-control

python3 -m tools.serve_smoke --device cuda --model $model --modes voxlane partition timeshare \
  --sequential 5 --concurrent 16 --seconds 3.2 --log-dir /tmp --out "$out/smoke.jsonl" 2>&1 | grep '^{'

python3 -m clients.cli compare --modes timeshare voxlane --model $model --device cuda \
  --rates 4 8 16 --duration 10 --max-audio-seconds 6 --out /tmp/compare 2>&1 | tail -12
cp /tmp/compare/compare.json /tmp/compare/compare.png "$out/" 2>/dev/null
for m in timeshare voxlane; do cp /tmp/compare/$m/results.json "$out/results-$m.json" 2>/dev/null; done
for f in /tmp/triton-*.log; do grep -l -E "Signal \(11|Fatal" "$f"; done
