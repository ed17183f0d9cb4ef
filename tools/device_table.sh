#!/usr/bin/env bash
# On a 2-GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_table.sh OUT_DIR
# GPU 0: colocate vs partition at the rates of tools/device_bench.sh (the other two rows of the
#        four-mode capacity table); GPU 1, at the same time: the families' GPU smoke
#        (tools/device_families.sh). GPUs are named by UUID (see gpu_uuid in tools/device_env.sh).
source tools/device_env.sh "$@" || exit 1
gpu0=$(gpu_uuid 0) gpu1=$(gpu_uuid 1)
common="--model qwen3-tts-1.7b --device cuda --duration 6 --max-audio-seconds 6"
( export CUDA_VISIBLE_DEVICES=$gpu0
  timeout 320 python3 -m server.cli compare --modes colocate partition $common --rates 1 2 4 8 16 \
    --out /tmp/cmp1 2>&1 | tail -4 ) > "$out/gpu0.txt" 2>&1 &
( export CUDA_VISIBLE_DEVICES=$gpu1
  mkdir -p /tmp/fam && bash tools/device_families.sh /tmp/fam 2>&1 | tail -40
  cp /tmp/fam/families.jsonl "$out/" 2>/dev/null ) > "$out/gpu1.txt" 2>&1 &
wait
python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
rows = {}
for f in Path("/tmp/cmp1").glob("*/results.json"):
    r = json.loads(f.read_text())
    rows[f.parent.name] = {"capacity": r["capacity"], "summaries": r["summaries"], "server": r.get("server")}
Path(sys.argv[1], "capacity.json").write_text(json.dumps(rows, indent=1))
PY
cat "$out/gpu0.txt" "$out/gpu1.txt"
crashed_logs /tmp/cmp1/*/tritonserver.log | sed "s/^/CRASH in /"
grep -h -E "^E[0-9]" /tmp/cmp1/*/tritonserver.log | head -5
