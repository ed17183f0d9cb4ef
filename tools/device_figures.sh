#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload
# copied to .devdata/ (both carried):   JOBS="..." LIMIT_S=560 bash tools/device_figures.sh OUT_DIR
# WORKLOAD (a .tsv, the shared short one by default) and MAX_AUDIO_S (6) pick the texts, e.g. the long-form
# paragraphs uncapped: WORKLOAD=.devdata/librispeech_pc_paragraphs.tsv MAX_AUDIO_S=120 DURATION=150.
# KV_GB gives each LM's KV pool that many GiB (0, the default: sized from the memory free when it allocates).
# tools/figures.py runs in a session of its own (it outlives this command while the machine stays up):
# the first call starts it with $JOBS; a later call on the same machine only waits for it (JOBS is
# then ignored). Each call packs what is measured so far into OUT_DIR/figs.tgz before LIMIT_S.
set -uo pipefail
out=${1:?usage: bash $0 OUT_DIR}
state=${STATE:-/tmp/voxlane-figures}
limit=${LIMIT_S:-560}
mkdir -p "$out"
if [ ! -f "$state/started" ]; then
  source tools/device_env.sh "$out" || exit 1
  trap - EXIT  # the MPS daemon belongs to tools/figures.py, which outlives this script
  export TORCHINDUCTOR_COMPILE_THREADS=${COMPILE_THREADS:-4}  # several servers compile at once
  mkdir -p "$state" && touch "$state/started"
  setsid nohup python3 -m tools.figures --state "$state" --workload ${WORKLOAD:-.devdata/librispeech_pc_test_clean.tsv} \
    --max-audio-seconds ${MAX_AUDIO_S:-6} --kv-cache-gb ${KV_GB:-0} --duration ${DURATION:-5} --jobs $JOBS > "$state/figures.log" 2>&1 < /dev/null &
  echo "figures: started ($(nproc) cores)"
else
  echo "figures: attached to the run started earlier"
fi
while [ ! -f "$state/done" ] && [ $SECONDS -lt "$limit" ]; do sleep 5; done
grep -E '^\{"label|Error|error|Traceback' "$state/figures.log" | cut -c1-400 | tail -40
grep -h -E "Signal \(11|Fatal|out of memory" "$state"/logs/*.log 2>/dev/null | head -5
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
tar czf "$out/figs.tgz" -C "$state" --exclude=mps --exclude=logs --exclude=started . 2>/dev/null
for f in "$state"/logs/*.log; do tail -c 30000 "$f" > "$out/tail-$(basename "$f")"; done 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" $(cd "$out" && ls tail-*.log 2>/dev/null) && rm -f "$out"/tail-*.log
ls -la "$out"
