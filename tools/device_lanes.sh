#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_lanes.sh OUT_DIR
# 1. the partition's effect: LM frame time and codec batch latency under our own MPS daemon
#    at the lane percentages vs 100 %; 2. the serving smoke in each mode; 3. voxlane compare.
source tools/device_env.sh "$@" || exit 1
model=qwen3-tts-1.7b

mps_start /tmp/voxlane-mps || exit 1
for pct in 100 75; do
  env $mps_env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct timeout 150 \
    python3 -m server.microbench.lm --model $model --batch-sizes 1 32 2>&1 | tail -6
done | tee "$out/lm_mps.txt"
for pct in 100 25; do
  env $mps_env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct timeout 90 \
    python3 -m server.microbench.codec --model $model --batch-sizes 1 8 16 2>&1 | grep '^{'
done | tee "$out/codec_mps.jsonl"
mps_stop

python3 -m tools.smoke --device cuda --models $model --modes voxlane partition timeshare \
  --sequential 5 --concurrency 16 --seconds 3.2 --log-dir /tmp --out "$out/smoke.jsonl" 2>&1 | grep '^{'

python3 -m server.cli compare --modes timeshare voxlane --model $model --device cuda \
  --rates 4 8 16 --duration 10 --max-audio-seconds 6 --out /tmp/compare 2>&1 | tail -12
cp /tmp/compare/compare.json /tmp/compare/compare.png "$out/" 2>/dev/null
for m in timeshare voxlane; do cp /tmp/compare/$m/results.json "$out/results-$m.json" 2>/dev/null; done
crashed_logs /tmp/triton-*.log
