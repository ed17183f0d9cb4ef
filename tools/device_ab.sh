#!/usr/bin/env bash
# Side by side on a 2-GPU machine: the SLO capacity of an older revision (GPU 0) and of this
# checkout (GPU 1), same modes, rates and workload, at the same time. From the checkout root,
# with the devpack carried in .devpack/ and the older revision's code unpacked (and carried) in
# .abtree/old, e.g. (naming the folders REV has)
#   mkdir -p .abtree/old && git archive REV backend_python server clients protocol audio scheduler tools \
#     model_repository | tar -x -C .abtree/old
#   bash tools/device_ab.sh OUT_DIR          (MODES, RATES, DURATION override the defaults)
# The older revision's Triton stubs import its own code: they take sys.path from the python3 that
# runs its CLI, here a second venv whose first .pth names .abtree/old. About 6 minutes.
source tools/device_env.sh "$@" || exit 1
old=$PWD/.abtree/old
[ -d "$old/backend_python" ] || { echo "no older revision in $old"; exit 1; }
rm -rf /tmp/stubenv-old && python3 -m venv --without-pip /tmp/stubenv-old || exit 1
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
echo "$old" > "$(purelib /tmp/stubenv-old/bin/python3)/000_old.pth"
cp "$(purelib /tmp/stubenv/bin/python3)/00_devpack.pth" "$(purelib /tmp/stubenv-old/bin/python3)/"
(cd /tmp && /tmp/stubenv-old/bin/python3 -c 'import backend_python, numpy; print("old:", backend_python.__file__, "numpy", numpy.__version__)')
args="--model ${MODEL:-qwen3-tts-1.7b} --device cuda --duration ${DURATION:-6} --max-audio-seconds 6
  --modes ${MODES:-timeshare voxlane} --rates ${RATES:-2 4 8 12 16}"
old_cli=clients.cli  # a revision from before server/ had the whole CLI in clients/
[ -f "$old/server/cli.py" ] && old_cli=server.cli
(cd "$old" && CUDA_VISIBLE_DEVICES=$(gpu_uuid 0) timeout 540 /tmp/stubenv-old/bin/python3 -m $old_cli compare \
  $args --out /tmp/ab-old > "$out/old.txt" 2>&1) &
CUDA_VISIBLE_DEVICES=$(gpu_uuid 1) timeout 540 python3 -m server.cli compare $args --out /tmp/ab-new > "$out/new.txt" 2>&1 &
wait
python3 - <<'PY' | tee "$out/ab.txt"
import json
from pathlib import Path
def caps(root):
    return {f.parent.name: json.loads(f.read_text())["capacity"] for f in sorted(Path(root).glob("*/results.json"))}
old, new = caps("/tmp/ab-old"), caps("/tmp/ab-new")
def fmt(c):
    return "-" if c["rate"] is None else (">=" if c["is_lower_bound"] else "") + f"{c['rate']:.2f}"
print(f"{'mode':<10} {'old 90%':>9} {'new 90%':>9} {'old 99%':>9} {'new 99%':>9}")
for mode in sorted(set(old) | set(new)):
    o, n = old.get(mode), new.get(mode)
    cells = [fmt(x[q]) if x else "-" for q in ("0.90", "0.99") for x in (o, n)]
    print(f"{mode:<10} {cells[0]:>9} {cells[1]:>9} {cells[2]:>9} {cells[3]:>9}")
PY
tail -n 5 "$out/old.txt" "$out/new.txt"
mkdir -p "$out/results" && for d in /tmp/ab-old /tmp/ab-new; do
  for f in $d/*/results.json; do cp "$f" "$out/results/$(basename $d)-$(basename $(dirname $f)).json"; done; done
