#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload in
# .devdata/ (both carried):   bash tools/device_tontaube.sh OUT_DIR
# TontaubeV1 (issue 35, item 6) on one H200:
# 1. its CUDA-only unit tests (the semantic model's graph replay against its eager twin, the refiners on CUDA
#    against the CPU) and its golden tests;
# 2. `tontaube-2.9b` (random weights, bf16, graphed) served in `voxlane` (refinement lanes beside the codec lanes)
#    and in `timeshare` (the LM lane refines and decodes inline) at once under one MPS daemon (tools/figures.py):
#    each gets 20 idle requests (its idle TTFA, target p50 <= 150 ms), then its 90 % capacity bracketed on the
#    short workload capped at 6 s (TTFA SLO 400 ms). RATES (voxlane/timeshare first rates), KV_GB, FIGURES_S and
#    DURATION are environment settings. About 8 minutes.
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-tontaube-2.9b}
rates=${RATES:-"8/16,4/8"}
state=${STATE:-/tmp/voxlane-tontaube}
export TORCHINDUCTOR_COMPILE_THREADS=${COMPILE_THREADS:-4}
timeout 240 python3 -m pytest -q -p no:cacheprovider -rs tests/unit/test_tontaube_graphs.py \
  tests/unit/test_tontaube_predictor.py tests/unit/test_tontaube_cascade.py tests/unit/test_tontaube_dualcodec.py \
  > "$out/cuda-tests.txt" 2>&1
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
