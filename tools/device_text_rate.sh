#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload
# copied to .devdata/ (both carried):   bash tools/device_text_rate.sh OUT_DIR
# Streaming text in (issue 18): one server (`voxlane serve --device cuda --model qwen3-tts-1.7b`, voxlane
# mode, every default), then `voxlane bench` against it on the LibriSpeech workload capped at 6 s:
# whole-text requests, then each request's text streamed at 10, 30 and 100 tokens/s, each at request
# rates around its predicted capacity (RATES_WHOLE, RATES_10, RATES_30, RATES_100; DURATION s of arrivals
# per rate; SERVE_FLAGS go to `voxlane serve`, e.g. "--max-slots 64"). Writes under OUT_DIR: whole/, text10/, text30/, text100/ (results.json each),
# text_rate.md and text_rate.json (capacities and per-rate TTFA and stalls side by side), startup.txt,
# serve.log and tritonserver.log.gz. About 7 minutes; no bench runs past LIMIT_S (results.json is
# rewritten after every rate, so a run cut short keeps what it measured). CONFIGS="whole text100" runs a
# subset (two calls of one server start each hold all four); `python -m clients.bench.text_report DIR...`
# puts the parts side by side afterwards.
source tools/device_env.sh "$@" || exit 1
limit=${LIMIT_S:-540}
workload=.devdata/librispeech_pc_test_clean.tsv
[ -f "$workload" ] || { echo "no workload at $workload"; exit 1; }

started=$SECONDS
python3 -m server.cli serve --device cuda --model ${MODEL:-qwen3-tts-1.7b} ${SERVE_FLAGS:-} --log-file "$out/tritonserver.log" \
  > "$out/serve.log" 2>&1 &
serve=$!
stop_server() { kill -TERM $serve 2>/dev/null && wait $serve; }
trap 'stop_server; mps_stop' EXIT
until grep -q "^voxlane: ready" "$out/serve.log"; do
  if ! kill -0 $serve 2>/dev/null || [ $((SECONDS - started)) -gt ${START_S:-300} ]; then
    echo "server did not start in $((SECONDS - started)) s"; tail -20 "$out/serve.log"; tail -c 3000 "$out/tritonserver.log"; exit 1
  fi
  sleep 2
done
echo "startup_s $((SECONDS - started))" | tee "$out/startup.txt"

run_bench() {  # NAME RATES [BENCH FLAGS...]: one configuration, stopped before the script's limit
  local name=$1 rates=$2 left=$((limit - SECONDS))
  shift 2
  if [ $left -lt 40 ]; then echo "$name: skipped ($left s left)"; return; fi
  timeout $left python3 -m server.cli bench --url localhost:8001 --workload $workload --max-audio-seconds 6 \
    --duration ${DURATION:-20} --rates $rates --out "$out/$name" "$@" 2>&1 \
    | grep -E "^rate|capacity|Error|error" | cut -c1-400
}
for config in ${CONFIGS:-whole text10 text30 text100}; do  # a subset per call when one call cannot hold all
  case $config in
    whole) run_bench whole "${RATES_WHOLE:-24 32 40}" ;;
    text10) run_bench text10 "${RATES_10:-6 10 14}" --text-rate 10 ;;
    text30) run_bench text30 "${RATES_30:-16 24 32}" --text-rate 30 ;;
    text100) run_bench text100 "${RATES_100:-24 32 40}" --text-rate 100 ;;
    *) echo "unknown configuration $config" ;;
  esac
done

ran=$(for config in whole text10 text30 text100; do [ -f "$out/$config/results.json" ] && echo "$out/$config"; done)
[ -z "$ran" ] || python3 -m clients.bench.text_report $ran --json "$out/text_rate.json" | tee "$out/text_rate.md"
stop_server
crashed_logs "$out/tritonserver.log"
gzip -f "$out/tritonserver.log"
