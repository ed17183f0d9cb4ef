#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload in .devdata/
# (both carried):   bash tools/device_fused_e2e.sh OUT_DIR
# What a listener gets from the fused frame (issue "The frame at the GPU's floor, again", item 9): one
# `voxlane serve --device cuda` (qwen3-tts-1.7b, its gateway) per run in RUNS, one after the other, each measured
# through the OpenAI gateway with `voxlane bench --protocol openai`: idle TTFA (SEQUENTIAL requests one at a time,
# 1 req/s for DURATION_IDLE s), then open-loop Poisson arrivals of the short workload capped at MAX_AUDIO s at
# RATES req/s (DURATION s each): TTFA p50/p95, stalls. RUNS: fused (--fused-frame), plain (--no-fused-frame,
# today's default) and noroom (plain with --first-chunk-room 0: the one-frame first chunk only for a request that
# starts alone, as before the chunk plan followed the load), overlap1 (plain with --overlap-min-rows 1: every LM step
# overlapped, as before the minimum). Each rate's results hold the first audio's phases (the server's /metrics).
# Writes bench-RUN.txt, results-RUN.json and each server's log under OUT_DIR.
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-qwen3-tts-1.7b}
work=/tmp/fused-e2e && rm -rf $work && mkdir -p $work
export TORCHINDUCTOR_COMPILE_THREADS=${COMPILE_THREADS:-6}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"

start_serve() {  # NAME FLAGS...: `voxlane serve` in the background until its gateway is ready
  local name=$1; shift
  local started=$SECONDS
  python3 -m server.cli serve --device cuda --model "$model" --log-file $work/$name-triton.log \
    --gateway-port 9000 "$@" > $work/$name-serve.out 2>&1 &
  serve_pid=$!
  for _ in $(seq ${START_S:-240}); do
    grep -q "gateway ready" $work/$name-serve.out && { echo "$name ready in $((SECONDS - started)) s" | tee -a "$out/startup.txt"; return 0; }
    kill -0 $serve_pid 2>/dev/null || break
    sleep 1
  done
  echo "serve $name did not start:"; tail -30 $work/$name-serve.out; return 1
}
stop_serve() { kill -TERM $serve_pid 2>/dev/null; wait $serve_pid; gzip -c $work/$1-triton.log > "$out/$1-triton.log.gz"; }

bench() {  # NAME RATES...: the sweep through the gateway
  local name=$1; shift
  timeout ${BENCH_S:-260} python3 -m server.cli bench --protocol openai --url 127.0.0.1:9000 --rates "$@" \
    --metrics-url http://127.0.0.1:8002/metrics \
    --duration ${DURATION:-12} --max-audio-seconds ${MAX_AUDIO:-6} --workload .devdata/librispeech_pc_test_clean.tsv \
    --out $work/bench-$name 2>&1 | grep -vE "^[IWE][0-9]" | tail -25 | tee "$out/bench-$name.txt"
  cp $work/bench-$name/results.json "$out/results-$name.json" 2>/dev/null
}

for run in ${RUNS:-fused plain}; do
  case $run in
    fused) flags=--fused-frame ;;
    plain) flags=--no-fused-frame ;;
    noroom) flags="--no-fused-frame --first-chunk-room 0" ;;
    overlap1) flags="--no-fused-frame --overlap-min-rows 1" ;;  # every LM step overlapped, as before the minimum
    *) echo "unknown run $run"; continue ;;
  esac
  if start_serve $run $flags; then  # word-split: $flags may hold several
    bench $run ${RATES:-1 4 10 16 20}
    stop_serve $run
  fi
done
crashed_logs $work/*-triton.log
