#!/usr/bin/env bash
# On a 2-GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_table.sh OUT_DIR
# GPU 0: colocate vs partition at the rates of tools/device_bench.sh (the other two rows of the
#        four-mode capacity table);
# GPU 1: the model families' GPU smoke (tools/device_families.sh), the codec lane per MPS share
#        and side by side with the LM, then voxlane mode with the codec at 40 %.
# GPUs are named by UUID: an MPS daemon renumbers the GPUs it is given from 0, so an index would
# name another GPU (or none) for its clients.
set -uo pipefail
out=${1:?OUT_DIR}
source .devpack/devpack-install.sh .devpack || exit 1
echo "$PWD" > /tmp/site/voxlane-checkout.pth
export PYTHONUNBUFFERED=1 VOXLANE_CACHE=/tmp/voxlane-cache
model=qwen3-tts-1.7b
uuid() { nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$1"; }
gpu0=$(uuid 0) gpu1=$(uuid 1)
common="--model $model --device cuda --duration 6 --max-audio-seconds 6"
(
  export CUDA_VISIBLE_DEVICES=$gpu0
  timeout 330 python3 -m clients.cli compare --modes colocate partition $common --rates 1 2 4 8 16 \
    --out /tmp/cmp1 2>&1 | tail -4
) > "$out/gpu0.txt" 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$gpu1
  mkdir -p /tmp/fam && bash tools/device_families.sh /tmp/fam 2>&1 | tail -30
  cp /tmp/fam/families.jsonl "$out/" 2>/dev/null
  timeout 150 python3 -m clients.cli microbench --model $model --lm-pcts --codec-pcts 100 25 \
    --codec-batch-sizes 1 16 --splits 75:25 60:40 --seconds 5 --out /tmp/micro.json 2>&1 | tail -25
  timeout 150 python3 -m clients.cli compare --modes voxlane --codec-sm-pcts 40 $common --rates 8 16 \
    --out /tmp/sweep 2>&1 | tail -4
) > "$out/gpu1.txt" 2>&1 &
wait
python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = {}
for d in ("/tmp/cmp1", "/tmp/sweep"):
    for f in Path(d).glob("*/results.json"):
        r = json.loads(f.read_text())
        rows[f.parent.name] = {"capacity": r["capacity"], "summaries": r["summaries"], "server": r.get("server")}
(out / "capacity.json").write_text(json.dumps(rows, indent=1))
PY
cat "$out/gpu0.txt" "$out/gpu1.txt"
for f in /tmp/cmp1/*/tritonserver.log /tmp/sweep/*/tritonserver.log; do
  grep -l -E "Signal \(11|Fatal" "$f" && grep -E "^E" "$f" | head -5; done 2>/dev/null
