#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload in
# .devdata/ (both carried):   bash tools/device_flow_families.sh OUT_DIR
# The flow-matching families on one H200: (1) a CUDA check of each model alone (load, a few decode steps,
# one codec window); (2) every family's servers in all four modes started together under one MPS daemon,
# then measured one at a time (tools/figures.py): `voxlane` and `timeshare` bracketed for their SLO
# capacity, `partition` and `colocate` at one rate; (3) the codec lane's cost per chunk at each SM share
# (`voxlane microbench`, codec table only, a window of the family's steady chunk). MODELS, the rates, the
# time limits and PARTS (which of check, figures, micro to run) are environment settings.
source tools/device_env.sh "$@" || exit 1
models=${MODELS:-"cosyvoice3-0.5b flashtts-0.5b"}
state=${STATE:-/tmp/voxlane-families}
export TORCHINDUCTOR_COMPILE_THREADS=${COMPILE_THREADS:-2}
parts=" ${PARTS:-check figures micro} "
if [[ $parts == *" check "* ]]; then
timeout ${CHECK_S:-75} python3 -m pytest -q -p no:cacheprovider -rs tests/unit/test_cosyvoice3_lm.py \
  tests/unit/test_flashtts_lm.py tests/unit/test_cosyvoice3_flow_graphs.py tests/unit/test_flashtts_window_graphs.py \
  -k "cuda or graph" > "$out/cuda-tests.txt" 2>&1 &  # graph replay == eager, on CUDA
for model in $models; do  # both at once: a minute, not two
  timeout ${CHECK_S:-75} python3 -m tools.family_check --model "$model" > "$out/check-$model.json" 2> "$out/check-$model.err" &
done
wait
cat "$out"/check-*.json; tail -n 3 "$out"/check-*.err; tail -n 4 "$out/cuda-tests.txt"
fi
if [[ $parts == *" figures "* ]]; then
jobs= one=
for model in $models; do  # the capacities first; `partition` and `colocate` at one rate each, last
  rates=$(echo ${RATES:-"cosyvoice3-0.5b=4/8,2/4 flashtts-0.5b=12/20,1/2"} | tr ' ' '\n' | grep "^$model=" | cut -d= -f2)
  vox=${rates%%,*} ts=${rates##*,}
  jobs="$jobs voxlane@$model:poisson:${vox:-8/16}:1:4:4 timeshare@$model:poisson:${ts:-4/8}:1:4:4"
  one="$one partition@$model:poisson:${vox%%/*}:1:0:1 colocate@$model:poisson:${vox%%/*}:1:0:1"
done
jobs="$jobs $one"
mkdir -p "$state"
timeout ${FIGURES_S:-400} python3 -m tools.figures --state "$state" --workload .devdata/librispeech_pc_test_clean.tsv \
  --duration ${DURATION:-5} --sequential 4 --stop-after-s $(( ${FIGURES_S:-400} - 60 )) --jobs $jobs \
  > "$state/figures.log" 2>&1
grep -E '^\{"label|Error|Traceback' "$state/figures.log" | cut -c1-500 | tail -30
tar czf "$out/families.tgz" -C "$state" --exclude=mps --exclude=logs . 2>/dev/null
for f in "$state"/logs/*.log; do tail -c 20000 "$f" > "$out/tail-$(basename "$f")"; done 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" $(cd "$out" && ls tail-*.log 2>/dev/null) && rm -f "$out"/tail-*.log
fi
[[ $parts == *" micro "* ]] && for model in $models; do
  frames=$(echo ${CODEC_FRAMES:-"cosyvoice3-0.5b=25 flashtts-0.5b=18"} | tr ' ' '\n' | grep "^$model=" | cut -d= -f2)
  timeout ${MICRO_S:-180} python3 -m server.cli microbench --model "$model" --lm-pcts --splits \
    --codec-pcts ${CODEC_PCTS:-100 40 15} --codec-batch-sizes 1 16 ${frames:+--codec-frames $frames} \
    --out "$out/microbench-$model.json" \
    > "$out/microbench-$model.md" 2> "$out/microbench-$model.err"
  cat "$out/microbench-$model.md"; tail -3 "$out/microbench-$model.err"
done
ls -la "$out"
