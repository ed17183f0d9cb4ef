#!/usr/bin/env bash
# On one H200, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_families.sh OUT_DIR
# 1. the CUDA-only unit tests of every family (graph replay == eager frame, bf16 kernels vs the
#    CPU reference, codec graphs and the fused SnakeBeta kernel);
# 2. each registered full-size family preset (csm-1b, orpheus-3b, voxtral-4b when registered) served in
#    voxlane mode: 3 sequential requests, then 4 and 16 concurrent streams of 3.2 s each;
#    TTFA p50 and real-time factor per level in OUT_DIR/families.jsonl (MODELS overrides the presets,
#    CUDA_TESTS the test files, SEQUENTIAL the sequential requests, SMOKE_TIMEOUT_S its limit).
#    About 3 minutes.
source tools/device_env.sh "$@" || exit 1
nvidia-smi --query-gpu=name,memory.total,compute_mode --format=csv,noheader
python3 -c 'import transformers, torch; print("transformers", transformers.__version__, "torch", torch.__version__)'

# the unit tests on the last GPU, at the same time as the serving smoke on the first
gpus=$(nvidia-smi --query-gpu=uuid --format=csv,noheader)
first=$(echo "$gpus" | head -1) last=$(echo "$gpus" | tail -1)
tests=${CUDA_TESTS:-tests/unit/test_csm_graphs.py tests/unit/test_csm_codec.py tests/unit/test_orpheus_graphs.py
  tests/unit/test_qwen3_tts_graphs.py tests/unit/test_codec_runner.py tests/unit/test_voxtral_family.py}
CUDA_VISIBLE_DEVICES=$last timeout 240 python3 -m pytest -q -p no:cacheprovider -rs $tests > "$out/cuda-tests.txt" 2>&1 &
tests_pid=$!
export CUDA_VISIBLE_DEVICES=$first

models=${MODELS:-$(python3 -c 'from backend_python.models import registry
print(" ".join(m for m in ("csm-1b", "orpheus-3b", "voxtral-4b") if m in registry.preset_names()))')}
echo "models: $models"
timeout ${SMOKE_TIMEOUT_S:-420} python3 -m tools.smoke --device cuda --modes voxlane --models $models \
  --sequential ${SEQUENTIAL:-3} --concurrency 4 16 --seconds 3.2 --log-dir "$out" --out "$out/families.jsonl" 2>&1 | grep -E '^\{|Error|error' | head -20
rc=${PIPESTATUS[0]}
for f in "$out"/triton-*.log; do echo "== $f"; grep -E "^E|Error|Signal \(11|Fatal" "$f" | grep -v -E "NVML|DCGM" | head -5; done
wait $tests_pid; tail -15 "$out/cuda-tests.txt"
exit $rc
