#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ (and, for PART=capacity, the shared
# workload in .devdata/), both carried:   PART=micro|capacity bash tools/device_fused_predictor.sh OUT_DIR
# The code predictor's one-kernel attention (issue "The frame at the GPU's floor", item 2), against PyTorch's
# kernels, side by side on one H200 with qwen3-tts-1.7b:
#   micro     the CUDA-only tests of the kernel and of the decode path (TESTS; empty: none), the kernel's launch
#             settings timed (TUNE=1, server/microbench/short_attention.py), then the LM frame profile at batch 1, 32
#             and 128 (context 256, compiled as the engine runs it), fused and with --no-fused-predictor:
#             lm_fused.{txt,json}, lm_unfused.{txt,json}, profile.md (about 7 minutes with a cold cache)
#   capacity  TESTS (default: the kernel's; empty: none), then both servers (`voxlane`, `voxlane+fp=0`) started at
#             once (tools/figures.py, KV_GB of KV cache each): idle time to first audio (SEQUENTIAL one at a time)
#             and the 90 % capacity on the shared workload capped at 6 s
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-qwen3-tts-1.7b}
export TORCHINDUCTOR_COMPILE_THREADS=${COMPILE_THREADS:-4}
case ${PART:?PART=micro|capacity} in
  micro)
    [ -z "${TESTS-x}" ] || timeout ${TESTS_S:-200} python3 -m pytest -q -p no:cacheprovider \
      ${TESTS:-tests/unit/test_short_attention.py tests/unit/test_qwen3_tts_graphs.py} 2>&1 | tail -15 | tee "$out/cuda_tests.txt"
    if [ "${TUNE:-1}" = 1 ]; then  # the kernel's launch settings timed; the fastest one for the frames below
      best=$(timeout 150 python3 -m server.microbench.short_attention --json "$out/short_attention.json" \
        | tee "$out/short_attention.txt" | tail -1)
      cat "$out/short_attention.txt"
      [ -n "$best" ] && export VOXLANE_SHORT_ATTENTION_LAUNCH=$best
    fi
    for run in fused unfused; do
      flags=; [ $run = unfused ] && flags=--no-fused-predictor
      timeout ${MICRO_S:-200} python3 -m server.microbench.lm --model "$model" --batch-sizes ${SIZES:-1 32 128} \
        --context ${CONTEXT:-256} --profile --top 15 --json "$out/lm_$run.json" $flags > "$out/lm_$run.txt" 2>&1
      echo "== lm_$run: exit $?"
      grep -E "^#|^[0-9]+ \||^batch \|" "$out/lm_$run.txt"
    done
    python3 -m server.microbench.profile_report "$out/lm_unfused.json" "$out/lm_fused.json" --top-batch 1 \
      > "$out/profile.md"
    head -40 "$out/profile.md" ;;
  capacity)
    [ -z "${TESTS-x}" ] || timeout ${TESTS_S:-150} python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/unit/test_short_attention.py} \
      2>&1 | tail -6 | tee "$out/cuda_tests.txt"
    state=${STATE:-/tmp/voxlane-fused}
    mkdir -p "$state"
    timeout ${FIGURES_S:-500} python3 -m tools.figures --state "$state" --model "$model" \
      --workload .devdata/librispeech_pc_test_clean.tsv --duration ${DURATION:-6} --sequential ${SEQUENTIAL:-30} \
      --stop-after-s $(( ${FIGURES_S:-500} - 60 )) --kv-cache-gb ${KV_GB:-20} \
      --jobs ${JOBS:-voxlane:poisson:${RATES:-32/40}:1:4:4 voxlane+fp=0:poisson:${RATES:-32/40}:1:4:4} \
      > "$state/figures.log" 2>&1
    grep -E '^\{"label|Error|Traceback' "$state/figures.log" | cut -c1-700 | tail -30
    python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(json.dumps(r["servers"], indent=0))' \
      "$state/report.json" 2>/dev/null
    tar czf "$out/fused-capacity.tgz" -C "$state" --exclude=mps . 2>/dev/null ;;
esac
crashed_logs "$out"/*.log
