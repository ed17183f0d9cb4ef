#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_voice_clone.sh OUT_DIR
# Serves MODEL (default qwen3-tts-tiny-base) with `voxlane serve --device cuda` (MPS: the voice_encoder lane at
# its own share) and clones a synthesised reference x-vector only and in context, twice each, printing TTFA,
# chunks and whether the same seed gave the same audio; then a bad reference and a reference to a lane that
# refuses it. The tritonserver log goes to OUT_DIR.
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-qwen3-tts-tiny-base}
# the reference's rate; 24000 needs no resampling: the devpack carries no soxr wheel (2026-12), so on the H200 a
# reference at another rate fails in the encoder lane ("No module named 'soxr'"), as an output `sample_rate` would
rate=${REF_RATE:-16000}
nvidia-smi --query-gpu=name,memory.total,compute_mode --format=csv,noheader
python3 - "$model" "$out" "$rate" <<'PY'
import sys, time
from pathlib import Path
import numpy as np
from server.serve import ServeConfig, Server
from clients.stream import StreamError, synthesize
from tests.reference_audio import voiced

model, out, rate = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
reference = dict(ref_audio=voiced(3.0, rate), ref_sample_rate=rate)
with Server(ServeConfig(model=model, device="cuda"), log_path=out / "tritonserver.log") as server:
    print("ready", flush=True)
    for kind, extra in (("x_vector", dict(x_vector_only=True)), ("in_context", dict(ref_text="A reference."))):
        runs = []
        for _ in range(2):
            started = time.perf_counter()
            runs.append(synthesize(server.grpc_url, "Get the trust fund to the bank early.", seed=1,
                                   max_audio_seconds=2.0, ignore_eos=True, **reference, **extra))
            print(f"{kind}: ttfa {runs[-1].ttfa_s * 1e3:.1f} ms, {len(runs[-1].chunks)} chunks, "
                  f"{runs[-1].audio_seconds:.2f} s, wall {time.perf_counter() - started:.2f} s", flush=True)
        print(f"{kind}: same audio {np.allclose(runs[0].audio, runs[1].audio, atol=1e-3)}", flush=True)
    for bad in (dict(ref_audio=np.zeros(16000, np.float32), ref_sample_rate=16000, x_vector_only=True),):
        try:
            synthesize(server.grpc_url, "Hi.", **bad)
        except StreamError as exc:
            print("refused:", exc.ended, flush=True)
PY
rc=$?
grep -E "^E|Error|error" "$out/tritonserver.log" | grep -v -E "NVML|DCGM" | head -5
exit $rc
