#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload in
# .devdata/ (both carried):   bash tools/device_audio_in.sh OUT_DIR
# Streaming audio in (issue 36) on one H200: `tse-1.7b` (a Qwen3-1.7B-sized interleaved LM over the 12 Hz codec,
# random weights, bf16) served in `voxlane` mode; `voxlane bench --audio-in-rate 1` (every request's input sent
# at real time in 80-ms pieces) at RATES arrivals/s on the short workload capped at CAP_S s: a rate of R keeps
# about R × CAP_S streams live. Reports per rate the algorithmic latency (input chunk in -> its output chunk out)
# p50/p95, TTFA from the first piece, and stalls split into the input's and the server's. About 6 minutes.
source tools/device_env.sh "$@" || exit 1
# the encoder lane's cost of input chunks, as references (speaker network + codec encoder, one at a time) against
# encode_codes (codec encoder alone, batched), side by side
python3 -m tools.input_coding --preset tse-1.7b --device cuda --dtype bfloat16 --streams 1 8 32 \
  > "$out/input_coding.txt" 2>&1; cat "$out/input_coding.txt"
rates=${RATES:-"1 2 4 6 8"}
cap=${CAP_S:-6}
log="$out/tritonserver.log"
python3 -m server.cli serve --model tse-1.7b --device cuda --dtype bfloat16 --kv-cache-gb ${KV_GB:-8} \
  --http-port 18000 --grpc-port 18001 --metrics-port 18002 > "$out/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 90); do grep -q "ready" "$out/serve.log" && break; sleep 2; done
grep -m1 "ready" "$out/serve.log" || { tail -30 "$out/serve.log"; kill $serve_pid; exit 1; }
timeout ${BENCH_S:-300} python3 -m server.cli bench --url localhost:18001 --rates $rates --duration 20 \
  --workload .devdata/librispeech_pc_test_clean.tsv --max-audio-seconds $cap --audio-in-rate 1 \
  --ttfa-slo-ms ${SLO_MS:-400} --out "$out/bench" 2>&1 | grep -E "rate |capacity|Error" | tail -20
kill -INT $serve_pid; wait $serve_pid
