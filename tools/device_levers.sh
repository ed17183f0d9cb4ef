#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload
# copied to .devdata/ (both carried):   bash tools/device_levers.sh OUT_DIR
# tools/levers.py: voxlane mode (default 60/40 split) on the LibriSpeech workload capped at 6 s, one
# server, each lever against the same baseline (the router or a codec lane reloads between variants).
source tools/device_env.sh "$@" || exit 1
variants=${VARIANTS:-baseline urgent-budget margin-q95 mps-priority baseline}
timeout ${LIMIT_S:-530} python3 -m tools.levers --model ${MODEL:-qwen3-tts-1.7b} --variants $variants \
  --workload .devdata/librispeech_pc_test_clean.tsv --rates ${RATES:-26 30 34 38} --duration ${DURATION:-6} \
  --log "$out/triton-levers.log" --bench-out /tmp/bench-levers --out "$out/levers.json" 2>&1 \
  | grep -E '^rate|^\{"variant|Error|error' | cut -c1-700
crashed_logs "$out"/*.log
gzip -f "$out/triton-levers.log"
