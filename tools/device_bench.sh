#!/usr/bin/env bash
# On a 2-GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_bench.sh OUT_DIR
# The capacity table of issue 4 for qwen3-tts-1.7b, with both GPUs busy:
#   GPU 0: timeshare vs voxlane (the headline ratio, same GPU), then the codec SM-share sweep
#          of voxlane mode (codec 15 % and 40 %; 25 % is the run before);
#   GPU 1: colocate vs partition, then idle TTFA through the Triton path per first-chunk size
#          and the LM frame profile at batch 1.
# First the CUDA-only unit tests (graph vs eager, fused kernels): on failure nothing else runs.
source tools/device_env.sh "$@" || exit 1
model=qwen3-tts-1.7b
gpu0=$(gpu_uuid 0) gpu1=$(gpu_uuid 1)
CUDA_VISIBLE_DEVICES=$gpu0 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/unit/test_codec_runner.py \
  tests/unit/test_qwen3_tts_graphs.py 2>&1 | tail -4 | tee "$out/cuda_tests.txt"
grep -q failed "$out/cuda_tests.txt" && exit 1
common="--model $model --device cuda --duration 6 --max-audio-seconds 6"
(
  export CUDA_VISIBLE_DEVICES=$gpu0
  timeout 330 python3 -m server.cli compare --modes timeshare voxlane $common --rates 1 2 4 8 16 \
    --out /tmp/cmp0 2>&1 | tail -4
  timeout 230 python3 -m server.cli compare --modes voxlane --codec-sm-pcts 15 40 $common --rates 4 8 16 \
    --out /tmp/sweep 2>&1 | tail -4
) > "$out/gpu0.txt" 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=$gpu1
  timeout 330 python3 -m server.cli compare --modes colocate partition $common --rates 1 2 4 8 16 \
    --out /tmp/cmp1 2>&1 | tail -4
  timeout 150 python3 -m tools.smoke --device cuda --models $model --modes voxlane \
    --first-chunk-frames 1 2 --sequential 8 --concurrency 16 --seconds 3.2 --log-dir /tmp --out "$out/smoke.jsonl" \
    2>&1 | tail -3
  timeout 60 python3 -m server.microbench.lm --model $model --batch-sizes 1 --profile 2>&1 | tail -60
) > "$out/gpu1.txt" 2>&1 &
wait
python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = {}
for d in ("/tmp/cmp0", "/tmp/cmp1", "/tmp/sweep"):
    for f in Path(d).glob("*/results.json"):
        r = json.loads(f.read_text())
        rows[f.parent.name] = {"capacity": r["capacity"], "summaries": r["summaries"], "server": r.get("server")}
(out / "capacity.json").write_text(json.dumps(rows, indent=1))
PY
cat "$out/gpu0.txt" "$out/gpu1.txt"
crashed_logs /tmp/cmp*/*/tritonserver.log /tmp/sweep/*/tritonserver.log /tmp/triton-*.log
