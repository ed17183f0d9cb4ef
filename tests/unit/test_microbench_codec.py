"""`server.microbench.codec --streaming` on the CPU: the background lane's continued call, timed as it runs."""
from __future__ import annotations

import json

import pytest

from server.microbench import codec as codec_bench


def rows(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def test_streaming_calls_continue_each_streams_state(capsys):
    codec_bench.main(["--model", "qwen3-tts-tiny", "--dtype", "float32", "--device", "cpu", "--streaming",
                      "--batch-sizes", "1", "3", "--chunk-frames", "2", "5", "--repeats", "2"])
    out = rows(capsys)
    assert [(r["batch"], r["frames"]) for r in out] == [(1, 2), (3, 2), (1, 5), (3, 5)]
    for r in out:
        assert r["bench"] == "codec_streaming" and r["ms"] > 0
        assert r["decoded_per_new"] == 1.0  # no timed call rebuilt a state from its window
        assert r["bucket"] is None and r["padding"] is None  # no graphs on the CPU
        assert r["state_kb_per_stream"] > 0 and r["floor_ms"] > 0


def test_streaming_names_a_codec_that_keeps_no_state(capsys):
    with pytest.raises(SystemExit):
        codec_bench.main(["--model", "orpheus-tiny", "--dtype", "float32", "--device", "cpu", "--streaming",
                          "--batch-sizes", "1"])
    assert "keeps no streaming state" in capsys.readouterr().err


def test_profile_needs_a_streaming_call_on_cuda(capsys):
    with pytest.raises(SystemExit):
        codec_bench.main(["--model", "qwen3-tts-tiny", "--dtype", "float32", "--device", "cpu", "--streaming",
                          "--profile"])
    assert "--profile" in capsys.readouterr().err
