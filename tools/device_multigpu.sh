#!/usr/bin/env bash
# On a machine with two GPUs, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_multigpu.sh OUT_DIR
# SLO capacity (90 % and 99 % attainment) of qwen3-tts-1.7b, every request through the OpenAI
# gateway (`voxlane bench --protocol openai`), in three layouts:
#   1gpu          one VoxLane on GPU 0 (a gateway in front of that server alone)
#   replicate     one VoxLane per GPU, one gateway spreading streams over both
#   disaggregate  one server: the LM lane on GPU 0, both codec lanes on GPU 1
# and the gateway's own cost: its per-chunk write time (gRPC arrival → HTTP write, from its
# /metrics) and TTFA at 1 req/s through the gateway vs straight to Triton's gRPC port.
# The gateway needs aiohttp: build the devpack with its cp312 wheels as extra specs, e.g.
#   devpack.sh .devpack aiohttp==3.11.11 multidict==6.1.0 yarl==1.18.3 frozenlist==1.5.0 \
#     aiosignal==1.3.2 attrs==24.3.0 propcache==0.2.1 aiohappyeyeballs==2.4.4 idna==3.10
# Wall time about 8 minutes. RATES, DURATION and MODEL override the defaults; LAYOUTS picks and
# orders the servers (`replicate` also measures 1gpu through a gateway on GPU 0's server alone;
# default "replicate disaggregate"); LOWLOAD=0 skips the gateway-vs-gRPC TTFA at 1 req/s.
source tools/device_env.sh "$@" || exit 1
python3 -c "import aiohttp" || { echo "aiohttp is missing: add its wheels to the devpack (see above)"; exit 1; }
model=${MODEL:-qwen3-tts-1.7b}
rates=${RATES:-4 8 16 24}
duration=${DURATION:-8}
work=/tmp/multigpu && rm -rf $work && mkdir -p $work
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv | tee "$out/gpus.csv"

start_serve() {  # NAME FLAGS...: `voxlane serve` in the background until its gateway is ready
  local name=$1; shift
  python3 -m server.cli serve --device cuda --model "$model" --log-file $work/$name-triton.log \
    --gateway-port 9000 "$@" > $work/$name-serve.out 2>&1 &
  serve_pid=$!
  for _ in $(seq 300); do
    grep -q "gateway ready" $work/$name-serve.out && { grep ready $work/$name-serve.out; return 0; }
    kill -0 $serve_pid 2>/dev/null || break
    sleep 1
  done
  echo "serve $name did not start:"; tail -30 $work/$name-serve.out; return 1
}
stop_serve() { kill -TERM $serve_pid 2>/dev/null; wait $serve_pid; }
fetch() { python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$1"; }

bench() {  # NAME PROTOCOL URL RATES...: one sweep; results.json and the per-rate lines kept
  local name=$1 protocol=$2 url=$3; shift 3
  timeout 200 python3 -m server.cli bench --protocol $protocol --url $url --rates "$@" --duration $duration \
    --max-audio-seconds 6 --out $work/$name 2>&1 | grep -E "^rate|capacity|error" | tee "$out/bench-$name.txt"
  cp $work/$name/results.json "$out/results-$name.json" 2>/dev/null
}

run_replicate() {
if start_serve replicate --gpus 0,1; then
  nvidia-smi --query-gpu=index,memory.used --format=csv | tee "$out/gpus-replicate.csv"
  python3 -m server.cli gateway --triton 127.0.0.1:8001 --triton-metrics http://127.0.0.1:8002/metrics \
    --port 9001 > $work/gateway-1gpu.out 2>&1 &
  gateway_pid=$!
  sleep 5
  if [ "${LOWLOAD:-1}" = 1 ]; then
    bench lowload-grpc grpc 127.0.0.1:8001 1
    bench lowload-gateway openai 127.0.0.1:9001 1
    fetch http://127.0.0.1:9001/metrics > "$out/gateway-metrics-lowload.txt"
  fi
  bench 1gpu openai 127.0.0.1:9001 $rates
  fetch http://127.0.0.1:9001/metrics > "$out/gateway-metrics-1gpu.txt"
  bench replicate openai 127.0.0.1:9000 $rates
  fetch http://127.0.0.1:9000/metrics > "$out/gateway-metrics-replicate.txt"
  fetch http://127.0.0.1:9000/health > "$out/gateway-health-replicate.json"
  kill -TERM $gateway_pid; wait $gateway_pid
  stop_serve
fi
}

run_disaggregate() {
if start_serve disaggregate --gpus 0,1 --layout disaggregate; then
  nvidia-smi --query-gpu=index,memory.used --format=csv | tee "$out/gpus-disaggregate.csv"
  bench disaggregate openai 127.0.0.1:9000 $rates
  fetch http://127.0.0.1:9000/metrics > "$out/gateway-metrics-disaggregate.txt"
  stop_serve
fi
}

for layout in ${LAYOUTS:-replicate disaggregate}; do run_$layout; done

python3 - "$out" <<'PY' | tee "$out/multigpu.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def cap(c):
    return "-" if c["rate"] is None else (">=" if c["is_lower_bound"] else "") + f"{c['rate']:g}"
print(f"{'layout':<16} {'cap@90%':>9} {'cap@99%':>9}  TTFA p50 per rate (ms)")
for name in ("lowload-grpc", "lowload-gateway", "1gpu", "replicate", "disaggregate"):
    path = out / f"results-{name}.json"
    if not path.exists():
        print(f"{name:<16} (no results)"); continue
    r = json.loads(path.read_text())
    ttfa = ", ".join(f"{s['rate']:g}: {s['ttfa_ms']['p50']}" for s in r["summaries"])
    print(f"{name:<16} {cap(r['capacity']['0.90']):>9} {cap(r['capacity']['0.99']):>9}  {ttfa}")
for name in ("lowload", "1gpu", "replicate", "disaggregate"):
    path = out / f"gateway-metrics-{name}.txt"
    if path.exists():
        lines = [l for l in path.read_text().splitlines() if l.startswith("voxlane_gateway_chunk_write_ms{")]
        quantiles = [l.split('quantile="')[1].replace('"}', "").split() for l in lines]
        print(f"gateway write ms ({name}): " + ", ".join(f"q{q} {v}" for q, v in quantiles))
PY
crashed_logs $work/*-triton*.log
cp $work/*-serve.out "$out/" 2>/dev/null
