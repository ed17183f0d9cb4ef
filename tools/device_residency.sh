#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workloads
# copied to .devdata/ (both carried):   CONFIGS="..." SERVE_FLAGS="..." bash tools/device_residency.sh OUT_DIR
# Live streams apart from the step's rows (issue "Hundreds of live streams on one GPU"): one server
# (`voxlane serve --device cuda --model qwen3-tts-1.7b $SERVE_FLAGS`), then `voxlane bench` against it, one
# configuration after another (CONFIGS, each a results.json under OUT_DIR/NAME):
#   tests       the CUDA-only tests of the pooled KV cache (before the server starts)
#   short6      the shared LibriSpeech workload capped at 6 s at RATES_SHORT6 (default 35 45 55)
#   short       the same uncapped (4-10 s) at RATES_SHORT (default 30 40)
#   ttfa        the short workload capped at 6 s at 10 and 20 req/s (TTFA p95 targets)
#   paragraphs  the long-form paragraphs (12.6-68 s) at RATES_PARAGRAPHS (default 8 12), DURATION_PARAGRAPHS s
#               of arrivals each (default 30): each stream plays for up to 68 s after its last arrival
# Every rate's summary line carries the LM's occupancy (mean live streams, waiting share, idle while
# waiting, mean step rows) from the server's metrics. No bench runs past LIMIT_S.
source tools/device_env.sh "$@" || exit 1
limit=${LIMIT_S:-560}
short=.devdata/librispeech_pc_test_clean.tsv
paragraphs=.devdata/librispeech_pc_paragraphs.tsv
[ -f "$short" ] && [ -f "$paragraphs" ] || { echo "no workloads in .devdata/"; exit 1; }

if [[ " ${CONFIGS:-} " == *" tests "* ]]; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider tests/unit/test_kv_pool.py 2>&1 | tail -4 | tee "$out/cuda_tests.txt"
fi
started=$SECONDS
python3 -m server.cli serve --device cuda --model ${MODEL:-qwen3-tts-1.7b} ${SERVE_FLAGS:-} \
  --log-file "$out/tritonserver.log" > "$out/serve.log" 2>&1 &
serve=$!
stop_server() { kill -TERM $serve 2>/dev/null && wait $serve; }
trap 'stop_server; mps_stop' EXIT
until grep -q "^voxlane: ready" "$out/serve.log"; do
  if ! kill -0 $serve 2>/dev/null || [ $((SECONDS - started)) -gt ${START_S:-330} ]; then
    echo "server did not start in $((SECONDS - started)) s"; tail -20 "$out/serve.log"; tail -c 3000 "$out/tritonserver.log"
    exit 1
  fi
  sleep 2
done
echo "startup_s $((SECONDS - started))" | tee "$out/startup.txt"
grep -h "KV pool" "$out/tritonserver.log" | tail -1 | cut -c1-300
nvidia-smi --query-gpu=memory.used,memory.total --format=csv | tee "$out/memory_after_start.txt"

run_bench() {  # NAME WORKLOAD RATES DURATION [BENCH FLAGS...]
  local name=$1 workload=$2 rates=$3 duration=$4 left=$((limit - SECONDS))
  shift 4
  if [ $left -lt 30 ]; then echo "$name: skipped ($left s left)"; return; fi
  timeout $left python3 -m server.cli bench --url localhost:8001 --workload $workload --duration $duration \
    --rates $rates --out "$out/$name" "$@" > "$out/$name.log" 2>&1
  python3 - "$out/$name/results.json" "$name" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"{sys.argv[2]}: no results ({e})")
print(sys.argv[2], "capacity", json.dumps(r.get("capacity")))
for s in r["summaries"]:
    t, o = s.get("server_time") or {}, (s.get("server_time") or {}).get("occupancy") or {}
    print(sys.argv[2], "rate", s["rate"], "slo", s["slo_attainment"], "ttfa", json.dumps(s["ttfa_ms"]),
          "stall", s["stall_rate"], "done_rps", s["completed_rps"], "audio_s_per_s", s.get("audio_s_per_s"),
          "idle", (t.get("share") or {}).get("idle"), "rows", t.get("mean_step_batch"),
          "live", o.get("mean_live_streams"), "waiting", o.get("waiting_share"), "idle_waiting", o.get("idle_while_waiting"))
PY
}
for config in ${CONFIGS:-short6 paragraphs}; do
  case $config in
    tests) ;;
    short6) run_bench short6 $short "${RATES_SHORT6:-35 45 55}" ${DURATION:-10} --max-audio-seconds 6 ;;
    short) run_bench short $short "${RATES_SHORT:-30 40}" ${DURATION:-10} ;;
    ttfa) run_bench ttfa $short "10 20" ${DURATION:-10} --max-audio-seconds 6 ;;
    paragraphs) run_bench paragraphs $paragraphs "${RATES_PARAGRAPHS:-8 12}" ${DURATION_PARAGRAPHS:-30} ;;
    *) echo "unknown configuration $config" ;;
  esac
  nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed "s/^/$config gpu_memory_used /"
done
stop_server
crashed_logs "$out/tritonserver.log"
gzip -f "$out/tritonserver.log"
