#!/usr/bin/env bash
# On a 2-GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_efficiency.sh OUT_DIR
# GPU 0: `voxlane microbench` (lanes per batch size and MPS share, then side by side).
# GPU 1, at the same time: the CUDA-only unit tests (graph vs eager), then idle and concurrent
# TTFA through the whole Triton path in voxlane and timeshare mode.
source tools/device_env.sh "$@" || exit 1
model=qwen3-tts-1.7b
(
  export CUDA_VISIBLE_DEVICES=$(gpu_uuid 0)
  timeout 560 python3 -m server.cli microbench --model $model --lm-batch-sizes 1 8 32 64 \
    --codec-batch-sizes 1 4 16 32 --codec-pcts 100 40 25 --splits 75:25 60:40 --seconds 5 \
    --out "$out/microbench.json" > "$out/microbench.md" 2> "$out/microbench.err"
) &
(
  export CUDA_VISIBLE_DEVICES=$(gpu_uuid 1)
  timeout 200 python3 -m pytest -q -p no:cacheprovider tests/unit/test_codec_runner.py \
    tests/unit/test_qwen3_tts_graphs.py 2>&1 | tail -15
  timeout 330 python3 -m tools.smoke --device cuda --models $model --modes voxlane timeshare \
    --sequential 8 --concurrency 16 --seconds 3.2 --log-dir /tmp --out "$out/smoke.jsonl" 2>&1 | grep '^{'
) > "$out/gpu1.txt" 2>&1 &
wait
tail -40 "$out/microbench.err"
cat "$out/microbench.md" "$out/gpu1.txt"
crashed_logs /tmp/triton-*.log
