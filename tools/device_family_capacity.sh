#!/usr/bin/env bash
# Shared by the family device runs (device_voxtral.sh, device_tontaube.sh), sourced after device_env.sh with
# `model`, `rates`, `state` and `tests` set: the family's CUDA tests, then `voxlane` against `timeshare` at once
# under one MPS daemon (tools/figures.py): each gets 20 idle requests (its idle TTFA), then its 90 % capacity
# bracketed on the short workload capped at 6 s (TTFA SLO 400 ms). KV_GB, FIGURES_S and DURATION are environment
# settings.
export TORCHINDUCTOR_COMPILE_THREADS=${COMPILE_THREADS:-4}
timeout 240 python3 -m pytest -q -p no:cacheprovider -rs $tests > "$out/cuda-tests.txt" 2>&1
tail -5 "$out/cuda-tests.txt"
vox=${rates%%,*} ts=${rates##*,}
mkdir -p "$state"
timeout ${FIGURES_S:-420} python3 -m tools.figures --state "$state" --workload .devdata/librispeech_pc_test_clean.tsv \
  --duration ${DURATION:-5} --sequential 20 --ttfa-slo-ms 400 --kv-cache-gb ${KV_GB:-6} \
  --stop-after-s $(( ${FIGURES_S:-420} - 50 )) \
  --jobs "voxlane@$model:poisson:$vox:1:4:4" "timeshare@$model:poisson:$ts:1:4:4" > "$state/figures.log" 2>&1
grep -E '^\{"label|Error|Traceback' "$state/figures.log" | cut -c1-600 | tail -30
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(json.dumps(r["servers"], indent=0))' \
  "$state/report.json" 2>/dev/null
cp "$state/report.json" "$state/figures.log" "$out/" 2>/dev/null
for f in "$state"/*.log; do crashed_logs "$f"; done
