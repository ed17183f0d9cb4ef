#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload in
# .devdata/ (both carried):   MODEL=higgs-v3-4b bash tools/device_delay_families.sh OUT_DIR
# One delay-pattern family (issue 34's Figure 6 condition and its chunk-plan sweep) on one H200: every server
# below starts at once under one MPS daemon (tools/figures.py), then, one at a time, each gets its idle time
# to first audio and its jobs:
#   - the candidate plan (PLAN over the family's own; empty: the family's) in `voxlane`, `timeshare` (both
#     bracketed for their 90 % capacity) and `partition` (one rate);
#   - the sweep: the candidate's neighbours (first chunk, ramp, steady chunk, codec lookahead), each in `voxlane`
#     at the candidate's first rate. BENCHMARKS.md, "Delay-pattern families", has the runs behind today's plans.
# PLAN (the candidate's `+KEY=VALUE` overrides), SWEEP (the other plans), RATES (voxlane/timeshare first rates),
# SLO_MS, KV_GB, FIGURES_S and DURATION are environment settings; each family has its defaults below. JOBS
# replaces the whole job list (tools/figures.py's SERVER:ARRIVAL:RATES:SEEDS:WIDTH:MAX; `@MODEL` added to a server
# that names none).
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-higgs-v3-4b}
case $model in
  higgs-v3-*) plan=${PLAN-} sweep=${SWEEP-"+first=1 +first=3 +chunk=25 +chunk=64 +la=4"}
              rates=${RATES:-"8/16,2/4"} ;;
  zonos-*) plan=${PLAN-} sweep=${SWEEP-"+first=8+growth=2 +first=4+growth=1.25 +chunk=22 +chunk=86 +la=4"}
           rates=${RATES:-"2/4,1/2"} ;;
  *) echo "MODEL must be a higgs-v3 or zonos preset, got $model" >&2; exit 2 ;;
esac
state=${STATE:-/tmp/voxlane-delay-$model}
export TORCHINDUCTOR_COMPILE_THREADS=${COMPILE_THREADS:-2}
vox=${rates%%,*} ts=${rates##*,}
jobs="voxlane$plan@$model:poisson:$vox:1:4:4 timeshare$plan@$model:poisson:$ts:1:4:4"
for other in $sweep; do jobs="$jobs voxlane$other@$model:poisson:${vox%%/*}:1:0:1"; done
jobs="$jobs partition$plan@$model:poisson:${vox%%/*}:1:0:1"
if [ -n "${JOBS:-}" ]; then
  jobs=$(for job in $JOBS; do name=${job%%:*}; [[ $name == *@* ]] || name=$name@$model; echo "$name:${job#*:}"; done | tr '\n' ' ')
fi
echo "jobs: $jobs"
mkdir -p "$state"
timeout ${FIGURES_S:-480} python3 -m tools.figures --state "$state" --workload .devdata/librispeech_pc_test_clean.tsv \
  --duration ${DURATION:-5} --sequential 6 --ttfa-slo-ms ${SLO_MS:-400} --kv-cache-gb ${KV_GB:-6} \
  --stop-after-s $(( ${FIGURES_S:-480} - 50 )) --jobs $jobs > "$state/figures.log" 2>&1
grep -E '^\{"label|Error|Traceback' "$state/figures.log" | cut -c1-600 | tail -30
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(json.dumps(r["servers"], indent=0))' \
  "$state/report.json" 2>/dev/null
tar czf "$out/delay-$model.tgz" -C "$state" --exclude=mps --exclude=logs . 2>/dev/null
for f in "$state"/logs/*.log; do tail -c 20000 "$f" > "$out/tail-$(basename "$f")"; done 2>/dev/null
tar czf "$out/logs-$model.tgz" -C "$out" $(cd "$out" && ls tail-*.log 2>/dev/null) && rm -f "$out"/tail-*.log
ls -la "$out"
