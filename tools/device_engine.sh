#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_engine.sh OUT_DIR
# The LM frame of qwen3-tts-1.7b with and without Inductor (kernels per frame, frame time per batch
# size, compile time), then the CUDA-only tests of the decode path.
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-qwen3-tts-1.7b}
sizes=${SIZES:-1 8 32 64}
timeout ${COMPILED_S:-300} python3 -m server.microbench.lm --model $model --batch-sizes $sizes --profile \
  --json "$out/lm_compiled.json" > "$out/lm_compiled.txt" 2>&1
grep -E "^#|^[0-9]+ \||batch \|" "$out/lm_compiled.txt"; tail -3 "$out/lm_compiled.txt"
timeout ${PLAIN_S:-120} python3 -m server.microbench.lm --model $model --batch-sizes $sizes --profile --no-compile \
  --json "$out/lm_plain.json" > "$out/lm_plain.txt" 2>&1
grep -E "^#|^[0-9]+ \||batch \|" "$out/lm_plain.txt"
timeout ${TESTS_S:-150} python3 -m pytest -q -p no:cacheprovider tests/unit/test_qwen3_tts_graphs.py \
  tests/unit/test_engine_overlap.py 2>&1 | tail -8 | tee "$out/cuda_tests.txt"
