#!/usr/bin/env bash
# On the GPU machine, from the checkout root, devpack in .devpack/ and the workloads in .devdata/ (carried):
#   bash tools/device_soak.sh start OUT_DIR     # starts the server and the soak in their own sessions
#   bash tools/device_soak.sh collect OUT_DIR   # waits for the soak's end, stops the server, copies results
# A memory soak longer than one device command: `voxlane bench` at SOAK_RATE req/s (default 8.7, 80 % of the
# paragraphs capacity) for SOAK_S seconds of arrivals (default 600) of the paragraphs workload, with
# `python -m tools.procstats` sampling tritonserver's and each stub's RSS and the GPU's memory every 15 s.
# Both run under setsid in /tmp/soak, so they outlive `start`; `collect` must come while the machine is warm.
# `start` waits WAIT_S (default 0) before it returns, printing the last sample each minute.
set -uo pipefail
phase=${1:?usage: bash $0 start|collect OUT_DIR}
shift
dir=/tmp/soak
progress() {  # until the soak is done or WAIT_S has passed
  local until=$((SECONDS + ${WAIT_S:-0}))
  while [ ! -f $dir/done ] && [ $SECONDS -lt $until ]; do
    sleep 60
    echo "t=${SECONDS}s memory: $(tail -1 $dir/memory.csv)"
  done
}
case $phase in
  start)
    source tools/device_env.sh "$@" || exit 1
    rm -rf $dir && mkdir -p $dir
    setsid nohup python3 -m server.cli serve --device cuda --model ${MODEL:-qwen3-tts-1.7b} ${SERVE_FLAGS:-} \
      --log-file $dir/tritonserver.log > $dir/serve.log 2>&1 < /dev/null &
    started=$SECONDS
    until grep -q "^voxlane: ready" $dir/serve.log; do
      if [ $((SECONDS - started)) -gt 330 ]; then echo "no server"; tail -20 $dir/serve.log; exit 1; fi
      sleep 2
    done
    echo "startup_s $((SECONDS - started))"
    server=$(pgrep -n -x tritonserver)
    setsid nohup python3 -m tools.procstats --server-pid $server --every 15 --until-file $dir/done \
      > $dir/memory.csv 2> $dir/procstats.err < /dev/null &
    setsid nohup bash -c "python3 -m server.cli bench --url localhost:8001 --workload .devdata/librispeech_pc_paragraphs.tsv \
      --rates ${SOAK_RATE:-8.7} --duration ${SOAK_S:-600} --out $dir/bench > $dir/bench.log 2>&1; touch $dir/done" \
      < /dev/null > /dev/null 2>&1 &
    progress
    ;;
  collect)
    out=${1:?usage: bash $0 collect OUT_DIR}
    mkdir -p "$out"
    progress
    [ -f $dir/done ] || echo "the soak has not ended"
    pkill -TERM -f "server.cli serve" ; sleep 15
    cp $dir/memory.csv $dir/bench.log "$out/" 2>/dev/null
    gzip -c $dir/bench/results.json > "$out/results.json.gz" 2>/dev/null
    gzip -c $dir/tritonserver.log > "$out/tritonserver.log.gz"
    PYTHONPATH=/tmp/site python3 - $dir <<'PY'
import csv, json, sys
rows = list(csv.DictReader(open(f"{sys.argv[1]}/memory.csv")))
def show(row): return {k: v for k, v in row.items()}
print("samples", len(rows)); print("first", show(rows[0])); print("at 120 s", show(next((r for r in rows if float(r["elapsed_s"]) >= 120), rows[-1])))
print("last", show(rows[-1]))
for key in rows[0]:
    vals = [int(r[key]) for r in rows if r[key] and key != "elapsed_s"]
    if vals: print(key, "min", min(vals), "max", max(vals))
r = json.load(open(f"{sys.argv[1]}/bench/results.json"))
for s in r["summaries"]:
    o = (s.get("server_time") or {}).get("occupancy") or {}
    print("rate", s["rate"], "requests", s.get("num_requests"), "slo", s["slo_attainment"], "ttfa", s["ttfa_ms"], "stall", s["stall_rate"],
          "live", o.get("mean_live_streams"), "idle_waiting", o.get("idle_while_waiting"))
PY
    ;;
esac
