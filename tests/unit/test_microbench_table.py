"""`voxlane microbench` report: splits parse, tables show every measured row and the keep-up verdict."""
from __future__ import annotations

import argparse

import pytest

from server.microbench.cli import MicrobenchConfig, json_lines, parse_split
from server.microbench.table import format_tables

ROWS = [
    {"bench": "lm", "mps_pct": 100, "batch": 32, "graphs_ms": 15.8, "eager_ms": 100.0, "talker_ms": 4.0,
     "predictor_ms": 11.0, "floor_ms": 0.8},
    {"bench": "codec", "mps_pct": 25, "batch": 16, "frames": 10, "context": 25, "eager_ms": 172.0,
     "graphs_ms": 40.0, "host_copy_ms": 0.3},
    {"bench": "overlap", "role": "timeshare", "mps_pct": 100, "lm_batch": 32, "codec_batch": 16,
     "chunk_frames": 10, "lm_frames_per_s": 1500.0, "codec_frames_per_s": 1500.0},
    {"bench": "overlap", "role": "lm", "split": "75:25", "lm_frames_per_s": 1900.0},
    {"bench": "overlap", "role": "codec", "split": "75:25", "codec_frames_per_s": 1200.0},
]


def test_tables_show_each_measurement_and_the_verdict():
    text = format_tables(ROWS)
    assert "| 100 | 32 | 15.80 | 100.00 | 4.00 | 11.00 | 0.80 | 5.00 |" in text  # talker / floor = 5
    assert "| 25 | 16 | 172.00 | 40.00 | 0.30 |" in text
    assert "| MPS split LM:codec 75:25 | 1900.00 | 1200.00 | no |" in text
    assert "time sharing" in text


def test_split_parsing():
    assert parse_split("60:40") == (60, 40)
    with pytest.raises(argparse.ArgumentTypeError, match="LM:CODEC"):
        parse_split("sixty")


def test_percentages_are_checked():
    with pytest.raises(ValueError, match="MPS percentages"):
        MicrobenchConfig(splits=((75, 0),))


def test_only_worker_json_lines_are_kept():
    assert json_lines('# header\n{"bench": "lm", "batch": 1}\nnoise {"x": 1}\n') == [{"bench": "lm", "batch": 1}]


def test_codec_frames_reach_the_codec_worker(monkeypatch, tmp_path):
    from server.microbench import cli

    commands = []
    monkeypatch.setattr(cli.Microbench, "_worker", lambda self, worker, pct, *flags: commands.append(
        (worker, pct, flags)) or [])
    config = MicrobenchConfig(lm_pcts=(), codec_pcts=(40,), codec_batch_sizes=(1, 16), splits=(), codec_frames=25)
    cli.Microbench(config, {}, tmp_path).run_all()
    assert commands == [("codec", 40, ("--frames", 25, "--batch-sizes", 1, 16))]
    cli.Microbench(MicrobenchConfig(lm_pcts=(), codec_pcts=(15,), codec_batch_sizes=(1,), splits=()), {},
                   tmp_path).run_all()
    assert commands[-1] == ("codec", 15, ("--batch-sizes", 1))  # no --frames: the worker's own default
    with pytest.raises(ValueError, match="--codec-frames"):
        MicrobenchConfig(codec_frames=0)
