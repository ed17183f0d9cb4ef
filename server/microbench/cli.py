"""`voxlane microbench`: each lane on its own at several MPS shares, then both lanes side by side.

(a) LM frame time (talker + code predictor, CUDA graphs) per batch size and codec chunk latency per
batch size, each at several MPS active-thread percentages, with the talker's memory floor beside
the LM numbers; (b) LM and codec throughput running back to back in one process (time sharing)
versus concurrently in two processes on each MPS split. Every measurement is its own process, so
the percentage is set before CUDA initialises; one MPS daemon with private directories serves them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from server.microbench.table import format_tables
from server.mps import MpsDaemon


@dataclass(frozen=True)
class MicrobenchConfig:
    model: str = "qwen3-tts-1.7b"
    lm_pcts: tuple[int, ...] = (100, 75)
    codec_pcts: tuple[int, ...] = (100, 50, 25)
    lm_batch_sizes: tuple[int, ...] = (1, 8, 16, 32, 64)
    codec_batch_sizes: tuple[int, ...] = (1, 4, 8, 16, 32)
    codec_frames: int | None = None  # new frames per codec window; None: the codec worker's default (10)
    splits: tuple[tuple[int, int], ...] = ((75, 25), (60, 40))  # (LM %, codec %)
    seconds: float = 6.0
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        pcts = self.lm_pcts + self.codec_pcts + tuple(p for split in self.splits for p in split)
        if not all(1 <= p <= 100 for p in pcts):
            raise ValueError(f"MPS percentages must be in [1, 100], got {pcts}")
        if min(self.lm_batch_sizes + self.codec_batch_sizes) < 1 or self.seconds <= 0:
            raise ValueError("batch sizes must be >= 1 and --seconds > 0")
        if self.codec_frames is not None and self.codec_frames < 1:
            raise ValueError(f"--codec-frames must be >= 1, got {self.codec_frames}")


def parse_split(value: str) -> tuple[int, int]:
    lm, _, codec = value.partition(":")
    try:
        return int(lm), int(codec)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a split is LM:CODEC percentages, e.g. 75:25, got {value!r}") from None


def add_command(subparsers) -> None:
    parser = subparsers.add_parser("microbench", help="GPU: lane latency per batch size and MPS share; overlap")
    defaults = MicrobenchConfig()
    parser.add_argument("--model", default=defaults.model)
    parser.add_argument("--lm-pcts", nargs="*", type=int, default=list(defaults.lm_pcts),
                        help="MPS shares for the LM table (none: skip it)")
    parser.add_argument("--codec-pcts", nargs="*", type=int, default=list(defaults.codec_pcts),
                        help="MPS shares for the codec table (none: skip it)")
    parser.add_argument("--lm-batch-sizes", nargs="+", type=int, default=list(defaults.lm_batch_sizes))
    parser.add_argument("--codec-batch-sizes", nargs="+", type=int, default=list(defaults.codec_batch_sizes))
    parser.add_argument("--codec-frames", type=int, default=None,
                        help="new frames per codec window (a family's chunk, e.g. 25 for CosyVoice 3; default 10)")
    parser.add_argument("--splits", nargs="*", type=parse_split, default=list(defaults.splits),
                        metavar="LM:CODEC", help="MPS splits for the side-by-side run (none: skip it)")
    parser.add_argument("--seconds", type=float, default=defaults.seconds, help="timed seconds per overlap run")
    parser.add_argument("--out", type=Path, default=Path("microbench.json"))


def run(args: argparse.Namespace) -> int:
    config = MicrobenchConfig(model=args.model, lm_pcts=tuple(args.lm_pcts), codec_pcts=tuple(args.codec_pcts),
                              lm_batch_sizes=tuple(args.lm_batch_sizes),
                              codec_batch_sizes=tuple(args.codec_batch_sizes), splits=tuple(args.splits),
                              codec_frames=args.codec_frames,
                              seconds=args.seconds)
    with tempfile.TemporaryDirectory(prefix="voxlane-microbench-") as tmp:
        daemon = MpsDaemon(Path(tmp))
        daemon.start()
        try:
            rows = Microbench(config, daemon.env, Path(tmp)).run_all()
        finally:
            daemon.stop()
    args.out.write_text(json.dumps(rows, indent=1))
    print(format_tables(rows))
    print(f"wrote {args.out}")
    return 0


class Microbench:
    def __init__(self, config: MicrobenchConfig, mps_env: dict[str, str], scratch: Path) -> None:
        self.config, self.mps_env, self.scratch = config, mps_env, scratch

    def run_all(self) -> list[dict]:
        cfg = self.config
        rows = []
        for pct in cfg.lm_pcts:
            rows += self._worker("lm", pct, "--batch-sizes", *cfg.lm_batch_sizes)
        for pct in cfg.codec_pcts:
            frames = () if cfg.codec_frames is None else ("--frames", cfg.codec_frames)
            rows += self._worker("codec", pct, *frames, "--batch-sizes", *cfg.codec_batch_sizes)
        if cfg.splits:
            rows += self._worker("overlap", 100, "--role", "timeshare", *self._overlap_flags())
        for lm_pct, codec_pct in cfg.splits:
            rows += self._side_by_side(lm_pct, codec_pct)
        return rows

    def _overlap_flags(self) -> list:
        return ["--seconds", self.config.seconds]

    def _command(self, worker: str, *flags) -> list[str]:
        return [sys.executable, "-m", f"server.microbench.{worker}", "--model", self.config.model,
                *map(str, flags)]

    def _env(self, pct: int) -> dict[str, str]:
        return {**os.environ, **self.mps_env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct)}

    def _worker(self, worker: str, pct: int, *flags) -> list[dict]:
        print(f"microbench: {worker} at {pct}% {' '.join(map(str, flags))}", file=sys.stderr, flush=True)
        done = subprocess.run(self._command(worker, *flags), env=self._env(pct), capture_output=True, text=True,
                              timeout=self.config.timeout_s)
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
        return json_lines(done.stdout)

    def _side_by_side(self, lm_pct: int, codec_pct: int) -> list[dict]:
        """The LM and the codec in two processes on their MPS shares, timed over the same seconds."""
        print(f"microbench: side by side, LM {lm_pct}% + codec {codec_pct}%", file=sys.stderr, flush=True)
        barrier = Path(tempfile.mkdtemp(dir=self.scratch, prefix="barrier-"))
        procs = [subprocess.Popen(self._command("overlap", "--role", role, "--barrier", barrier,
                                                *self._overlap_flags()),
                                  env=self._env(pct), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for role, pct in (("lm", lm_pct), ("codec", codec_pct))]
        _wait_ready(barrier, procs, self.config.timeout_s)
        (barrier / "go").touch()
        rows = []
        for proc in procs:
            out, err = proc.communicate(timeout=self.config.timeout_s)
            if proc.returncode != 0:
                print(err[-3000:], file=sys.stderr)
            rows += [{**row, "split": f"{lm_pct}:{codec_pct}"} for row in json_lines(out)]
        return rows


def _wait_ready(barrier: Path, procs: list[subprocess.Popen], timeout_s: float) -> None:
    import time
    deadline = time.monotonic() + timeout_s
    while not all((barrier / f"{role}.ready").exists() for role in ("lm", "codec")):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            break  # a worker failed: go anyway, its error is printed after
        time.sleep(0.05)


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith('{"bench"')]
