#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_smoke.sh OUT_DIR [MODE ...]
# Runs tools/smoke.py with the full-size Qwen3-TTS-1.7B shape (MODEL overrides it) in each MODE
# (default: voxlane timeshare).
source tools/device_env.sh "$@" || exit 1
shift
modes=${*:-voxlane timeshare}
model=${MODEL:-qwen3-tts-1.7b}
nvidia-smi --query-gpu=name,memory.total,compute_mode --format=csv,noheader
which nvidia-cuda-mps-control
python3 -m tools.smoke --device cuda --models $model --modes $modes \
  --sequential 5 --concurrency 8 --seconds 1.6 --log-dir "$out" --out "$out/smoke.jsonl"
rc=$?
for f in "$out"/triton-*.log; do echo "== $f"; grep -E "^E|Error|error" "$f" | grep -v -E "NVML|DCGM" | head -5; done
exit $rc
