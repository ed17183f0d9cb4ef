#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ (built with a py-spy wheel:
# `devpack.sh .devpack soxr==1.0.0 py-spy`) and the shared workload in .devdata/ (both carried):
#   bash tools/device_host_profile.sh OUT_DIR
# Where the LM lane's host time goes under load (issue "The frame at the GPU's floor": at capacity the host
# was a third of the LM loop's busy time). One server (`voxlane serve --device cuda`, SERVE_FLAGS added), then
# `voxlane bench` at RATE req/s on the short workload capped at 6 s for DURATION s; from WARM_S s in, py-spy
# samples the LM lane's stub process for RECORD_S s. Writes lm.folded (py-spy's raw stacks), lm_profile.txt
# (tools/folded_report.py: the engine thread's inclusive shares, then the process's other threads), the
# bench's results.json (its server_time: the loop's phases) and the logs. About 4 minutes.
source tools/device_env.sh "$@" || exit 1
workload=.devdata/librispeech_pc_test_clean.tsv
spy=$(command -v py-spy || echo /tmp/site/bin/py-spy)
[ -x "$spy" ] || { echo "no py-spy: build the devpack with a py-spy wheel"; exit 1; }
started=$SECONDS
python3 -m server.cli serve --device cuda --model ${MODEL:-qwen3-tts-1.7b} --kv-cache-gb ${KV_GB:-20} \
  ${SERVE_FLAGS:-} --log-file "$out/tritonserver.log" > "$out/serve.log" 2>&1 &
serve=$!
trap 'kill -TERM $serve 2>/dev/null && wait $serve; mps_stop' EXIT
until grep -q "^voxlane: ready" "$out/serve.log"; do
  if ! kill -0 $serve 2>/dev/null || [ $((SECONDS - started)) -gt ${START_S:-300} ]; then
    echo "server did not start in $((SECONDS - started)) s"; tail -20 "$out/serve.log"; exit 1
  fi
  sleep 2
done
echo "startup_s $((SECONDS - started))"
lm=$(pgrep -f "triton_python_backend_stub .*/speechlm_lm/" | head -1)
python3 -m server.cli bench --url localhost:8001 --workload $workload --max-audio-seconds 6 \
  --duration ${DURATION:-40} --rates ${RATE:-44} --metrics-url http://localhost:8002/metrics --out "$out/bench" \
  > "$out/bench.log" 2>&1 &
bench=$!
sleep ${WARM_S:-10}
"$spy" record -p "$lm" -d ${RECORD_S:-20} -r ${SAMPLE_HZ:-250} --format raw -o "$out/lm.folded" > "$out/py-spy.log" 2>&1
"$spy" dump -p "$lm" > "$out/lm_dump.txt" 2>&1
wait $bench
grep -E "^rate|capacity" "$out/bench.log" | cut -c1-300
python3 -m tools.folded_report "$out/lm.folded" --top ${TOP:-50} | tee "$out/lm_profile.txt" | head -80
python3 - "$out/bench/results.json" <<'PY'
import json, sys
for s in json.load(open(sys.argv[1]))["summaries"]:
    print(s["rate"], s["slo_attainment"], json.dumps(s.get("server_time", {}).get("seconds")))
PY
gzip -f "$out/tritonserver.log"
