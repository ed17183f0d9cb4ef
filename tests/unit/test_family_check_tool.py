"""tools/family_check.py on the CPU: a model loads, prefills, decodes its frames per step and decodes a window
with its codec's windowing (what a device run checks before starting servers)."""
from __future__ import annotations

import pytest

from tools.family_check import check


@pytest.mark.parametrize("model,frames_per_step", [("cosyvoice3-tiny", 1), ("flashtts-tiny", 2)])
def test_a_flow_family_runs_alone(model, frames_per_step):
    row = check(model, "cpu", "float32", steps=2)
    assert row["frames_per_step"] == frames_per_step and row["runner_ms"] is None  # no runner timing off CUDA
    assert row["codec_window_frames"] == 2 * frames_per_step  # the frames of the 2 timed steps
    assert row["audio_samples"] > 0 and row["audio_peak"] > 0
    assert row["windowing"][1] > 0  # both have lookahead


def test_a_delayed_family_s_window_holds_complete_frames():
    row = check("higgs-v3-tiny", "cpu", "float32", steps=2)
    assert row["codec_window_frames"] == 2 and row["audio_samples"] > 0 and row["audio_peak"] > 0
    assert row["windowing"] == [12, 10, 0]
