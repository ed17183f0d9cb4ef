#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload
# copied to .devdata/ (both carried):   bash tools/device_targets.sh OUT_DIR
# tools/targets.py for voxlane, then timeshare (the baseline, same engine), one server each:
# start-up, idle TTFA, 16 streams of 12 s at once, capacity on the LibriSpeech workload capped at 6 s.
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-qwen3-tts-1.7b}
workload=.devdata/librispeech_pc_test_clean.tsv
run_mode() {  # MODE LIMIT_S CODEC_SM_PCT RATES...  (a run is named MODE-cPCT)
  local mode=$1 limit=$2 pct=$3; shift 3
  timeout "$limit" python3 -m tools.targets --model $model --mode $mode --codec-sm-pct $pct --workload $workload \
    --rates "$@" --duration ${DURATION:-8} --log "$out/triton-$mode-c$pct.log" --bench-out /tmp/bench-$mode-c$pct \
    --streams ${STREAMS:-16} --out "$out/targets-$mode-c$pct.json" 2>&1 | grep -E "^rate|^\{\"model" | cut -c1-400
}
if [ -n "${SWEEP:-}" ]; then  # SWEEP="PCT:RATES,PCT:RATES": voxlane once per codec share
  IFS=, read -ra runs <<< "$SWEEP"
  for run in "${runs[@]}"; do run_mode voxlane ${SWEEP_S:-170} ${run%%:*} ${run#*:}; done
else
  run_mode voxlane ${VOXLANE_S:-330} 25 ${VOXLANE_RATES:-16 28 40}
  run_mode timeshare ${TIMESHARE_S:-215} 25 ${TIMESHARE_RATES:-8 16 24}
fi
crashed_logs "$out"/*.log
