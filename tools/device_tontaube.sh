#!/usr/bin/env bash
# On the GPU machine, from the checkout root, with the devpack in .devpack/ and the shared workload in
# .devdata/ (both carried):   bash tools/device_tontaube.sh OUT_DIR
# TontaubeV1 (issue 35, item 6) on one H200:
# 1. its CUDA-only unit tests (the semantic model's graph replay against its eager twin, the refiners on CUDA
#    against the CPU) and its golden tests;
# 2. `tontaube-2.9b` (random weights, bf16, graphed) served in `voxlane` (refinement lanes beside the codec lanes)
#    and in `timeshare` (the LM lane refines and decodes inline) at once under one MPS daemon (tools/figures.py):
#    each gets 20 idle requests (its idle TTFA, target p50 <= 150 ms), then its 90 % capacity bracketed on the
#    short workload capped at 6 s (TTFA SLO 400 ms). RATES (voxlane/timeshare first rates), KV_GB, FIGURES_S and
#    DURATION are environment settings. About 8 minutes.
source tools/device_env.sh "$@" || exit 1
model=${MODEL:-tontaube-2.9b}
rates=${RATES:-"8/16,4/8"}
state=${STATE:-/tmp/voxlane-tontaube}
tests="tests/unit/test_tontaube_graphs.py tests/unit/test_tontaube_predictor.py tests/unit/test_tontaube_cascade.py tests/unit/test_tontaube_dualcodec.py"
source tools/device_family_capacity.sh
