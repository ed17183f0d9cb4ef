#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_compare.sh OUT_DIR
# The codec lane's latency at its MPS share vs the whole GPU, then timeshare vs voxlane under load.
source tools/device_env.sh "$@" || exit 1
model=qwen3-tts-1.7b
mps_start /tmp/voxlane-mps || exit 1
for pct in 100 25; do
  env $mps_env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct timeout 60 \
    python3 -m server.microbench.codec --model $model --batch-sizes 1 8 16 --repeats 5 2>&1 | tail -3
done | tee "$out/codec_mps.jsonl"
mps_stop
python3 -m server.cli compare --modes timeshare voxlane --model $model --device cuda \
  --rates 2 4 8 --duration 10 --max-audio-seconds 6 --out /tmp/compare 2>&1 | tail -12
cp /tmp/compare/compare.json /tmp/compare/compare.png "$out/" 2>/dev/null
