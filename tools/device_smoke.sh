#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_smoke.sh OUT_DIR [MODE ...]
# Installs the slim tritonserver, makes this checkout importable by the Python-backend
# stubs, and runs tools/serve_smoke.py with the full-size Qwen3-TTS-1.7B shape.
set -uo pipefail
out=${1:?OUT_DIR}; shift
modes=${*:-voxlane timeshare}
source .devpack/devpack-install.sh .devpack || exit 1
echo "$PWD" > /tmp/site/voxlane-checkout.pth   # the stubs take sys.path from /tmp/stubenv's python3
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 VOXLANE_CACHE=/tmp/voxlane-cache
model=${MODEL:-qwen3-tts-1.7b}
nvidia-smi --query-gpu=name,memory.total,compute_mode --format=csv,noheader
which nvidia-cuda-mps-control
python3 -m tools.serve_smoke --device cuda --model $model --modes $modes \
  --sequential 5 --concurrent 8 --seconds 1.6 --log-dir "$out" --out "$out/smoke.jsonl"
rc=$?
for f in "$out"/triton-*.log; do echo "== $f"; grep -E "^E|Error|error" "$f" | grep -v -E "NVML|DCGM" | head -5; done
exit $rc
