#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload
# copied to .devdata/ (both carried):
#   PART=smoke|voxlane|timeshare|tests bash tools/device_capacity.sh OUT_DIR
# The targets of the engine work for qwen3-tts-1.7b, one part per call (each fits one device call):
#   smoke      start-up time, idle time to first audio (8 requests one at a time), 16 streams of
#              12 s started at once (TTFA p99, audio seconds per second)
#   voxlane    capacity of voxlane mode on the shared LibriSpeech workload capped at 6 s, with the
#              LM's time breakdown per rate (results.json: summaries[].server_time)
#   timeshare  the same for timeshare mode (the baseline, with the same engine)
#   tests      the CUDA-only tests of the decode path
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-qwen3-tts-1.7b}
rates=${RATES:-10 20 30 40}
workload=.devdata/librispeech_pc_test_clean.tsv
case ${PART:?PART=smoke|voxlane|timeshare|tests} in
  smoke)
    timeout ${LIMIT_S:-500} python3 -m tools.smoke --device cuda --models $model --modes voxlane \
      --sequential 8 --concurrency 16 --seconds 12 --log-dir "$out" --out "$out/smoke.jsonl" 2>&1 | tail -4 ;;
  voxlane|timeshare)
    timeout ${LIMIT_S:-540} python3 -m server.cli compare --modes $PART --model $model --device cuda \
      --workload $workload --max-audio-seconds 6 --duration ${DURATION:-8} --rates $rates \
      --out /tmp/cap-$PART 2>&1 | grep -v "^compare: starting" | tail -12
    cp /tmp/cap-$PART/$PART/results.json "$out/results-$PART.json" 2>/dev/null
    cp /tmp/cap-$PART/$PART/tritonserver.log "$out/triton-$PART.log" 2>/dev/null
    python3 - "$out/results-$PART.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps(r["capacity"]))
for s in r["summaries"]:
    print(s["rate"], s["slo_attainment"], s["ttfa_ms"], s["stall_rate"], s["completed_rps"], json.dumps(s.get("server_time")))
PY
    ;;
  tests)
    timeout ${LIMIT_S:-400} python3 -m pytest -q -p no:cacheprovider -x --durations=8 tests/unit/test_codec_stream.py \
      tests/unit/test_codec_states.py tests/unit/test_codec_runner.py tests/unit/test_prefill_graphs.py \
      tests/unit/test_qwen3_tts_graphs.py 2>&1 | tail -30 | tee "$out/cuda_tests.txt" ;;
esac
crashed_logs "$out"/*.log
