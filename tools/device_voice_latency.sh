#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack carried in .devpack/:
#   bash tools/device_voice_latency.sh OUT_DIR
# Voice cloning's cost (issue 17): two servers side by side on one GPU, `qwen3-tts-1.7b-base` (clones) and
# `qwen3-tts-1.7b` (CustomVoice, preset voices), both `--partition none` (one GPU holds one MPS daemon, and the
# comparison is of request paths, not of SM shares); then tools/voice_latency.py: the voice_encoder lane's
# latency per reference length, and TTFA for an inline reference, a registered voice and a preset voice.
# Writes OUT_DIR/voice_latency.{txt,json} and both tritonserver logs. KV_GB: each server's KV cache (default 20).
source tools/device_env.sh "$@" || exit 1
python3 - "$out" <<'PY' 2>&1 | grep -v "^[IWE][0-9]" | tee "$out/voice_latency.txt"
import os, sys, threading, time
from pathlib import Path
from server.serve import ServeConfig, Server
from server.triton_launch import Ports
from tools import voice_latency

out = Path(sys.argv[1])
kv_gb = float(os.environ.get("KV_GB", "20"))  # each server's KV pool: two starting at once would each size theirs to the free memory
servers = {"base": Server(ServeConfig(model="qwen3-tts-1.7b-base", device="cuda", partition="none", kv_cache_gb=kv_gb,
                                      ports=Ports(8000, 8001, 8002)), log_path=out / "tritonserver-base.log"),
           "preset": Server(ServeConfig(model="qwen3-tts-1.7b", device="cuda", partition="none", kv_cache_gb=kv_gb,
                                        ports=Ports(8010, 8011, 8012)), log_path=out / "tritonserver-preset.log")}
started = time.perf_counter()
threads = [threading.Thread(target=s.start, kwargs=dict(timeout_s=300)) for s in servers.values()]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"both ready in {time.perf_counter() - started:.0f} s", flush=True)
try:
    voice_latency.main(["--base-url", servers["base"].grpc_url, "--preset-url", servers["preset"].grpc_url,
                        "--reps", "10", "--out", str(out / "voice_latency.json")])
finally:
    for s in servers.values():
        s.stop()
PY
crashed_logs "$out"/tritonserver-*.log
gzip -f "$out"/tritonserver-*.log
