#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload
# copied to .devdata/ (both carried):   bash tools/device_targets.sh OUT_DIR
# tools/targets.py for voxlane, then timeshare (the baseline, same engine), one server each:
# start-up, idle TTFA, 16 streams of 12 s at once, capacity on the LibriSpeech workload capped at 6 s.
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-qwen3-tts-1.7b}
workload=.devdata/librispeech_pc_test_clean.tsv
run_mode() {  # MODE LIMIT_S RATES...
  local mode=$1 limit=$2; shift 2
  timeout "$limit" python3 -m tools.targets --model $model --mode $mode --workload $workload --rates "$@" \
    --duration ${DURATION:-8} --log "$out/triton-$mode.log" --bench-out /tmp/bench-$mode \
    --out "$out/targets-$mode.json" 2>&1 | grep -E "^rate|^\{\"model" | cut -c1-400
}
run_mode voxlane ${VOXLANE_S:-330} ${VOXLANE_RATES:-12 20 28 36}
run_mode timeshare ${TIMESHARE_S:-230} ${TIMESHARE_RATES:-6 12 18 24}
crashed_logs "$out"/*.log
