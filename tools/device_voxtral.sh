#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload in
# .devdata/ (both carried):   bash tools/device_voxtral.sh OUT_DIR
# Voxtral-TTS (issue 35, item 6) on one H200:
# 1. its CUDA-only unit tests (the frame's graph replay, flow head inside, against its eager twin);
# 2. `voxtral-4b` (random weights, bf16, compiled and graphed) served in `voxlane` and in `timeshare` at once
#    under one MPS daemon (tools/figures.py): each gets 20 idle requests (its idle TTFA), then its 90 % capacity
#    bracketed on the short workload capped at 6 s (TTFA SLO 400 ms). RATES (voxlane/timeshare first rates),
#    KV_GB, FIGURES_S and DURATION are environment settings. About 8 minutes.
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-voxtral-4b}
rates=${RATES:-"12/24,6/12"}
state=${STATE:-/tmp/voxlane-voxtral}
tests="tests/unit/test_voxtral_family.py tests/unit/test_voxtral_golden.py"
source tools/device_family_capacity.sh
