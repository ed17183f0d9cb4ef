#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_next.sh OUT_DIR
# What the frame's and the families' issues left for a GPU that no run has measured. Each part has its own time
# limit and SKIP leaves parts out, in the order below. A call has 10 minutes; split the parts over calls with
# SKIP and a fresh OUT each (each call packs its own next.tgz), e.g.
#   SKIP="voxtral frame linear smoke" bash tools/device_next.sh OUT/a     (tests, attention, codec, fused_tests)
#   SKIP="tests attention linear codec fused_tests" bash tools/device_next.sh OUT/b     (voxtral, frame, smoke)
#   tests     the CUDA-only tests never run on a GPU: a cached voice prompt through the prefill graphs, the
#             split-KV decode attention (kernel, CUDA graphs, against flash varlen), the codec's streaming
#             state and graphs (one copy per row, the padded streaming convolution)
#   attention the decode attention kernel against flash varlen at 1 / 32 / 128 rows, 256 and 1024 keys
#             (server/microbench/decode_attention.py)
#   linear    the fused matmul against cuBLAS at 1-32 rows: where the crossover lies (MAX_KERNEL_ROWS)
#   frame     the LM frame at batch 1 / 32 / 128: compiled (the default), compiled with the Triton decode
#             attention (VOXLANE_DECODE_ATTENTION=triton), and fused (its matmul up to 16 rows)
#   voxtral   Voxtral's step at 1, 8 and 32 rows, profiled, with recompiles counted (tools.step_time)
#   codec     the background codec lane's call as it runs under load (continued chunks of 2 and 10 frames from
#             each stream's state, 1-32 streams), profiled: kernels per call, graph bucket and padding, the floor;
#             on the whole GPU, then at the lane's 25 % MPS share (server/microbench/codec.py --streaming)
#   smoke     eight Voxtral streams at once with the LM lane's account (tools.smoke): what falls behind real time
#             when the step alone batches (7.9 ms at 8 rows on an H100)
#   fused_tests  the fused frame's CUDA tests (their matmul now hands past 16 rows to cuBLAS)
# Everything comes back in next.tgz, the summaries beside it (summary.txt).
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-qwen3-tts-1.7b}
skip=" ${SKIP:-} "
export TORCHINDUCTOR_COMPILE_THREADS=${COMPILE_THREADS:-4}
summary="$out/summary.txt"
# each part writes under $work, packed into $out/next.tgz after it: a call cut off by its time limit still brings
# back what ran (the machine returns at most 8 files: the summary and the archive)
work=$(mktemp -d)
pack() { tar czf "$out/next.tgz" -C "$work" .; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$summary"
part() { [[ "$skip" != *" $1 "* ]]; }
if part tests; then
  echo "== CUDA tests" | tee -a "$summary"
  timeout ${TESTS_S:-100} python3 -m pytest -q -p no:cacheprovider tests/unit/test_prompt_cache.py \
    tests/unit/test_decode_attention.py tests/unit/test_codec_stream.py tests/unit/test_codec_states.py \
    tests/unit/test_codec_runner.py tests/unit/test_snake.py 2>&1 | tail -8 | tee -a "$summary"
fi
pack
if part attention; then
  echo "== decode attention" | tee -a "$summary"
  timeout ${ATTENTION_S:-60} python3 -m server.microbench.decode_attention --model "$model" --rows 1 32 128 \
    --contexts 256 1024 --compiled --json "$work/decode_attention.json" 2>&1 | tail -8 | tee -a "$summary"
fi
pack
if part linear; then
  echo "== fused matmul against cuBLAS" | tee -a "$summary"
  timeout ${LINEAR_S:-60} python3 -m server.microbench.fused_linear --model "$model" --rows 1 4 8 16 32 \
    --max-launches 4 --json "$work/fused_linear.json" > "$work/fused_linear.txt" 2>&1
  grep "^# rows" "$work/fused_linear.txt" | tee -a "$summary"
fi
pack
frame() {  # NAME ENV FLAGS: the frame at batch 1 / 32 / 128, context 256
  local name=$1 env=$2; shift 2
  echo "== frame $name ($env $*)" | tee -a "$summary"
  env $env timeout ${FRAME_S:-90} python3 -m server.microbench.lm --model "$model" --batch-sizes 1 32 128 \
    --context 256 --json "$work/lm_$name.json" "$@" > "$work/lm_$name.txt" 2>&1
  grep -E "^batch \||^[0-9]+ \|" "$work/lm_$name.txt" | head -6 | tee -a "$summary"
}
if part frame; then
  frame compiled VOXLANE_DECODE_ATTENTION=flash --no-fused-frame --profile
  frame compiled_triton_attention VOXLANE_DECODE_ATTENTION=triton --no-fused-frame --profile
  frame fused VOXLANE_DECODE_ATTENTION=flash --fused-frame --profile
fi
pack
if part voxtral; then
  echo "== voxtral step" | tee -a "$summary"
  timeout ${VOXTRAL_S:-180} python3 -m tools.step_time --preset voxtral-4b --device cuda --rows 1 8 32 --profile \
    > "$work/voxtral_step.txt" 2>&1
  grep "^{" "$work/voxtral_step.txt" | tee -a "$summary"
fi
pack
if part codec; then
  echo "== codec lane call" | tee -a "$summary"
  codec_bench() {  # NAME [VAR=VALUE...]: one run under that environment, a line per call in the summary
    local name=$1; shift
    env "$@" timeout ${CODEC_S:-90} python3 -m server.microbench.codec --model "$model" --streaming \
      --batch-sizes 1 4 8 16 32 --chunk-frames 2 10 --profile > "$work/codec_$name.jsonl" 2> "$work/codec_$name.err"
    python3 -c "import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:  # a line cut off by the time limit
        continue
    k = r.get('kernels', {})
    print(sys.argv[2], r['batch'], r['frames'], r['ms'], r['decoded_per_new'], r['bucket'], r['floor_ms'],
          k.get('count'), k.get('busy_ms'))
" "$work/codec_$name.jsonl" "$name" | tee -a "$summary"
  }
  echo "name batch frames ms decoded_per_new bucket floor_ms kernels busy_ms" | tee -a "$summary"
  codec_bench full
  mps_start /tmp/next-mps && codec_bench mps25 $mps_env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25
  mps_stop
fi
pack
if part smoke; then
  echo "== voxtral smoke" | tee -a "$summary"
  timeout ${SMOKE_S:-240} python3 -m tools.smoke --device cuda --models voxtral-4b --modes voxlane --sequential 3 \
    --concurrency 8 --seconds 1.6 --log-dir "$work" --out "$work/smoke.jsonl" > "$work/smoke.txt" 2>&1
  cut -c1-1200 "$work/smoke.jsonl" | tee -a "$summary"
  gzip -f "$work"/triton-*.log 2>/dev/null
fi
pack
if part fused_tests; then
  echo "== fused frame CUDA tests" | tee -a "$summary"
  timeout ${FUSED_TESTS_S:-200} python3 -m pytest -q -p no:cacheprovider tests/unit/test_fused_frame.py 2>&1 \
    | tail -8 | tee -a "$summary"
fi
pack
