#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_profile.sh OUT_DIR
# Where an LM frame's time goes (issue "The frame at the GPU's floor", item 1): qwen3-tts-1.7b, bf16,
# random weights, at batch 1, 32 and 128 with every slot advanced to a context of 256 keys, compiled as
# the engine runs it and uncompiled: kernels per frame (predictor, talker and outside the graphs), GPU
# time per kernel class, each half's longest kernels, the bandwidth floor. Writes lm_compiled.{txt,json},
# lm_plain.{txt,json} and profile.md (the tables for BENCHMARKS.md) under OUT_DIR; prints profile.md.
# About 5 minutes with a cold Inductor cache (most of it the compiled run's capture), 8 at most.
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-qwen3-tts-1.7b}
sizes=${SIZES:-1 32 128}
context=${CONTEXT:-256}
profile() {  # profile NAME TIMEOUT_S [FLAGS...]
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 -m server.microbench.lm --model "$model" --batch-sizes $sizes --context "$context" \
    --profile --top 15 --json "$out/lm_$name.json" "$@" > "$out/lm_$name.txt" 2>&1
  echo "== lm_$name: exit $?"
  grep -E "^#|^[0-9]+ \||^batch \|" "$out/lm_$name.txt"
}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader
profile compiled ${COMPILED_S:-300}
profile plain ${PLAIN_S:-150} --no-compile
python3 -m server.microbench.profile_report "$out/lm_compiled.json" "$out/lm_plain.json" --top-batch 1 \
  | tee "$out/profile.md"
