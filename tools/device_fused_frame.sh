#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_fused_frame.sh OUT_DIR
# The LM frame on fused Triton kernels (issue "The frame at the GPU's floor, again", items 1-3), against the
# compiled PyTorch frame, side by side on one GPU with qwen3-tts-1.7b:
#   1. the CUDA-only tests of the fused kernels and of the decode path (TESTS; empty: none)
#   2. the frame profile at batch 1, 32 and 128, context 256 (RUNS): fused (lm_fused), --no-fused-frame (lm_plain,
#      compiled as the engine runs it) and fused with --fp8-weights (lm_fp8); profile.md (the tables for BENCHMARKS.md)
#   3. float8 weights' agreement with bf16: greedy tokens and prefill logits over 32 texts of the shared workload
#      (server/microbench/fp8_agreement.py; the workload in .devdata/, carried; AGREEMENT=0 skips it)
#   4. the fused matmul's launches against PyTorch's kernels on the frame's projections (ROWS, LAUNCHES;
#      server/microbench/fused_linear.py; LINEAR=0 skips it)
# About 9 minutes with cold caches.
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-qwen3-tts-1.7b}
export TORCHINDUCTOR_COMPILE_THREADS=${COMPILE_THREADS:-4}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/gpu.txt"
[ -z "${TESTS-x}" ] || timeout ${TESTS_S:-240} python3 -m pytest -q -p no:cacheprovider -x \
  ${TESTS:-tests/unit/test_fused_frame.py tests/unit/test_qwen3_tts_graphs.py tests/unit/test_short_attention.py} \
  2>&1 | tail -15 | tee "$out/cuda_tests.txt"
profile="--profile --top 15"; [ "${PROFILE:-1}" = 1 ] || profile=
frame() {  # RUN: the frame profile, fused / plain (--no-fused-frame) / fp8 (--fp8-weights)
  local run=$1 flags=--fused-frame
  [ $run = plain ] && flags=--no-fused-frame; [ $run = fp8 ] && flags="--fused-frame --fp8-weights"
  timeout ${MICRO_S:-200} python3 -m server.microbench.lm --model "$model" --batch-sizes ${SIZES:-1 32 128} \
    --context ${CONTEXT:-256} $profile --json "$out/lm_$run.json" $flags > "$out/lm_$run.txt" 2>&1
  echo "== lm_$run: exit $?"
  grep -E "^#|^[0-9]+ \||^batch \|" "$out/lm_$run.txt" | grep -vE "^# +[0-9]" | head -24
}
report() { python3 -m server.microbench.profile_report "$@" --top-batch 1 > "$out/profile.md" 2>&1; head -24 "$out/profile.md"; }
frame fused
frame plain
report "$out/lm_plain.json" "$out/lm_fused.json"
[ "${AGREEMENT:-1}" = 1 ] && timeout ${AGREEMENT_S:-120} python3 -m server.microbench.fp8_agreement --model "$model" \
  --workload .devdata/librispeech_pc_test_clean.tsv --texts 32 --frames 24 --json "$out/fp8_agreement.json" 2>&1 | tail -14
if [ "${FP8_FRAME:-1}" = 1 ]; then
  frame fp8
  report "$out/lm_plain.json" "$out/lm_fused.json" "$out/lm_fp8.json"
fi
if [ "${LINEAR:-1}" = 1 ]; then
  timeout ${LINEAR_S:-150} python3 -m server.microbench.fused_linear --model "$model" --rows ${ROWS:-1 128} \
    --max-launches ${LAUNCHES:-8} --json "$out/fused_linear.json" > "$out/fused_linear.txt" 2>&1
  echo "== fused_linear: exit $?"
  grep -v "^# rows" "$out/fused_linear.txt" | tail -24; grep "^# rows" "$out/fused_linear.txt"
fi
# at most 8 files come back from the machine: everything in one archive, the summaries beside it
tar czf /tmp/fused_frame.tgz -C "$out" . && find "$out" -type f ! -name profile.md ! -name cuda_tests.txt \
  ! -name fp8_agreement.json -delete && mv /tmp/fused_frame.tgz "$out/"
