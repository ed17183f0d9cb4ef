"""A soak run: mixed valid, invalid and cancelled requests against one server, with resource figures.

    python -m tools.soak --minutes 30              # starts its own server (tiny preset, cpu)
    python -m tools.soak --minutes 30 --url HOST:8001 --server-pid PID
    python -m tools.soak --minutes 3 --clone       # a fifth of the requests clone a voice (tiny Base preset)
    python -m tools.soak --minutes 10 --audio-in --workers 16   # audio-in sessions at real time (tse-tiny)

Each worker loops: a valid request (ignore_eos, so its chunk count and sample
count are known), an invalid one, or one it cancels after a random number of
chunks. It prints, for tritonserver and each Python-backend stub, the peak
RSS during the warm-up (allocators keep the high-water mark of the batch sizes
they meet) and the RSS at the end once the server is idle, the thread counts
after the warm-up and at the end, and every chunk sequence that was not
0, 1, 2, … without gaps or duplicates. Chunk and sample counts assume the
default preset (80 ms frames of 1920 samples).
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np

from clients.live_stream import LiveStream, tensor
from clients.reference_clip import voiced
from clients.stream import build_inputs
from clients.voices import register_voice
from protocol.reference import ReferenceLimits
from tools.procstats import ProcStat, snapshot

CLONING_PRESET = "qwen3-tts-tiny-base"  # a tiny Qwen3-TTS Base model with its voice encoder
AUDIO_IN_PRESET = "tse-tiny"  # a tiny interleaved model: audio in, audio out (target-speaker extraction)
FRAME_RATE = 12.5  # the Qwen3-TTS 12 Hz codec: 80 ms frames of 1920 samples at 24 kHz
SAMPLES_PER_FRAME = 1920
RATE = 24000
MAX_OVERRUN = 3.0  # a warm-up bounded by work runs at most this many times its seconds
INVALID = [  # (inputs, a word the error must contain)
    (lambda: build_inputs(""), "empty"),
    (lambda: build_inputs(b"caf\xc3\x28"), "UTF-8"),
    (lambda: build_inputs("bell\x07"), "control character"),
    (lambda: build_inputs("Hi.", top_p=float("nan")), "top_p"),
    (lambda: build_inputs("Hi.", max_audio_seconds=-1.0), "max_audio_seconds"),
    (lambda: build_inputs("Hi.", voice="nobody"), "nobody"),
    (lambda: [tensor("text", "BYTES", np.array([b"a", b"b"], dtype=np.object_))], "shape"),
]


@dataclass
class SoakTally:
    """What the workers saw; `problems` lists every stream that broke the contract."""

    counts: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, problem: str | None = None) -> None:
        with self._lock:
            self.counts[kind] += 1
            if problem is not None:
                self.problems.append(f"{kind}: {problem}")

    def total(self) -> int:
        """Requests counted so far, of every kind."""
        with self._lock:
            return sum(self.counts.values())


def run_valid(url: str, rng: random.Random, tally: SoakTally, voice: str | None = None) -> None:
    frames = rng.randint(5, 25)
    with LiveStream(url, build_inputs(f"Soak request {rng.random():.6f}.", voice, seed=rng.randrange(1 << 30),
                                      max_audio_seconds=frames / FRAME_RATE, ignore_eos=True)) as stream:
        outcome = stream.read(timeout_s=120)
    tally.add("valid", whole_stream_problem(outcome, frames))


def whole_stream_problem(outcome, frames: int) -> str | None:
    """What is wrong with a stream that should have ended with `frames` frames in order, if anything."""
    if outcome.error is not None or not outcome.is_final:
        return f"ended with error={outcome.error!r}, timed out={outcome.is_timed_out}"
    if not outcome.is_in_order or outcome.num_samples != frames * SAMPLES_PER_FRAME:
        return f"chunks {outcome.chunk_indices}, {outcome.num_samples} samples for {frames} frames"
    return None


def run_invalid(url: str, rng: random.Random, tally: SoakTally) -> None:
    make_inputs, word = rng.choice(INVALID)
    with LiveStream(url, make_inputs()) as stream:
        outcome = stream.read(timeout_s=30)
    ok = outcome.error is not None and word in outcome.error and not outcome.chunk_indices
    tally.add("invalid", None if ok else f"expected an error naming {word!r}, got {outcome}")


def run_cancelled(url: str, rng: random.Random, tally: SoakTally, voice: str | None = None) -> None:
    num_chunks = rng.randint(0, 3)  # 0: the client goes away before its first chunk
    with LiveStream(url, build_inputs("A stream its client abandons.", voice, seed=rng.randrange(1 << 30),
                                      max_audio_seconds=8.0, ignore_eos=True)) as stream:
        outcome = stream.read(max_responses=num_chunks, timeout_s=60)
        stream.cancel()
    ok = outcome.is_in_order and outcome.error is None and not outcome.is_timed_out
    tally.add("cancelled", None if ok else f"before cancelling: {outcome}")


def run_cloned(url: str, rng: random.Random, tally: SoakTally) -> None:
    """A voice cloned from a reference of random length and rate, x-vector only or in context."""
    frames = rng.randint(5, 15)
    rate = rng.choice([16000, 22050, 24000, 44100])
    clone = {"x_vector_only": True} if rng.random() < 0.5 else {"ref_text": "A reference sentence, read aloud."}
    reference = voiced(rng.uniform(1.0, 4.0), rate, f0=rng.uniform(90.0, 220.0))
    with LiveStream(url, build_inputs(f"Cloned {rng.random():.6f}.", seed=rng.randrange(1 << 30),
                                      max_audio_seconds=frames / FRAME_RATE, ignore_eos=True, ref_audio=reference,
                                      ref_sample_rate=rate, **clone)) as stream:
        outcome = stream.read(timeout_s=120)
    tally.add("cloned", whole_stream_problem(outcome, frames))


def run_long_reference(url: str, rng: random.Random, tally: SoakTally) -> None:
    """A reference of up to the server's longest (60 s) at its highest rate (48 kHz): up to 11.5 MB in one request,
    which tritonserver's gRPC frontend once kept for reuse (its private memory grew to 8 such requests)."""
    limits = ReferenceLimits()
    frames = rng.randint(3, 6)
    reference = voiced(rng.uniform(10.0, limits.max_ref_audio_s - 1.0), limits.max_rate, f0=rng.uniform(90.0, 220.0))
    with LiveStream(url, build_inputs(f"Long reference {rng.random():.6f}.", seed=rng.randrange(1 << 30),
                                      max_audio_seconds=frames / FRAME_RATE, ignore_eos=True, ref_audio=reference,
                                      ref_sample_rate=limits.max_rate, x_vector_only=True)) as stream:
        outcome = stream.read(timeout_s=120)
    tally.add("cloned", whole_stream_problem(outcome, frames))


PLAIN_KINDS = [(run_valid, 0.6), (run_invalid, 0.2), (run_cancelled, 0.2)]
SOAK_VOICE = "soak-voice"


# The mix for a model that clones: the voice `register_soak_voice` registers speaks the valid and cancelled
# requests, and a quarter of the requests clone their own reference inline, some of the longest a server takes.
CLONING_KINDS = [(partial(run_valid, voice=SOAK_VOICE), 0.35), (run_invalid, 0.2),
                 (partial(run_cancelled, voice=SOAK_VOICE), 0.2), (run_cloned, 0.15), (run_long_reference, 0.1)]


def run_audio_in(url: str, rng: random.Random, tally: SoakTally) -> None:
    """An audio-in session of 2-6 s of input sent at real time in 80-ms pieces, a third of them with one bad
    piece among them (refused, the stream goes on): its output is exactly as long as its input."""
    from clients.audio_stream import stream_audio_in
    samples = noise(rng.uniform(2.0, 6.0), rng)
    pieces = frame_pieces(samples)
    has_bad = rng.random() < 1 / 3
    if has_bad:
        pieces.insert(rng.randrange(1, len(pieces)), np.full(64, np.nan, np.float32))
    result = stream_audio_in(url, pieces, RATE, noise(1.0, rng), RATE, timeout_s=120, piece_gap_s=1 / FRAME_RATE,
                             seed=rng.randrange(1 << 30))
    frames = -(-samples.size // SAMPLES_PER_FRAME)
    problem = None
    if [e.code for e in result.piece_errors] != (["bad_piece"] if has_bad else []):
        problem = f"piece errors {[e.code for e in result.piece_errors]}, one bad piece: {has_bad}"
    elif ([c.index for c in result.chunks] != list(range(len(result.chunks)))
          or result.audio.size != frames * SAMPLES_PER_FRAME):
        problem = f"chunks {[c.index for c in result.chunks]}, {result.audio.size} samples for {frames} frames"
    tally.add("audio-in", problem)


class _Leaving(Exception):
    pass


def run_audio_in_cancelled(url: str, rng: random.Random, tally: SoakTally) -> None:
    """An audio-in session its client leaves after 1-3 chunks, its input still coming at real time."""
    from clients.audio_stream import stream_audio_in
    pieces = frame_pieces(noise(6.0, rng))
    num_chunks, heard = rng.randint(1, 3), []

    def listen(chunk) -> None:
        heard.append(chunk.index)
        if len(heard) == num_chunks:
            raise _Leaving
    try:
        stream_audio_in(url, pieces, RATE, noise(1.0, rng), RATE, timeout_s=120, piece_gap_s=1 / FRAME_RATE,
                        on_chunk=listen)
        problem = f"the stream ended before its client left (chunks {heard})"
    except _Leaving:
        problem = None if heard == list(range(num_chunks)) else f"chunks {heard} before leaving"
    tally.add("audio-in-cancelled", problem)


def noise(seconds: float, rng: random.Random) -> np.ndarray:
    return np.random.default_rng(rng.randrange(1 << 30)).uniform(-0.3, 0.3, int(seconds * RATE)).astype(np.float32)


def frame_pieces(samples: np.ndarray) -> list[np.ndarray]:
    """`samples` in 80-ms pieces (one codec frame each), as a real-time client sends them."""
    return [samples[i:i + SAMPLES_PER_FRAME] for i in range(0, samples.size, SAMPLES_PER_FRAME)]


# The mix for a model that takes input audio (`tse-*`): sessions streamed in at real time, some left mid-input.
AUDIO_IN_KINDS = [(run_audio_in, 0.8), (run_audio_in_cancelled, 0.2)]


def register_soak_voice(url: str) -> None:
    """Register SOAK_VOICE, which CLONING_KINDS speaks: once, before its workers start (the server refuses a
    voice it does not know)."""
    register_voice(url, SOAK_VOICE, voiced(3.0, 24000), 24000, ref_text="A reference sentence, read aloud.")


def run_workers(url: str, seconds: float, num_workers: int, seed: int, tally: SoakTally,
                kinds=PLAIN_KINDS, rate: float | None = None, min_requests: int = 0) -> None:
    """`num_workers` clients for `seconds`, each drawing its requests from `kinds` ((run, weight) pairs); every
    request has ended when this returns. Closed loop (each client starts its next request as its last ends), or
    with `rate`, at most `rate` requests a second in all: each client starts one every `num_workers / rate` s,
    the clients staggered across that interval, and at once when its last request ran past its turn.
    `min_requests`: the clients go on past `seconds` until `tally` has counted that many requests (at most
    MAX_OVERRUN times `seconds` in all): a warm-up bounded by work as well as time, since a loaded machine serves
    fewer in the same seconds."""
    if rate is not None and not rate > 0:
        raise ValueError(f"rate must be > 0 requests a second, got {rate}")
    started = time.monotonic()
    stop_at, give_up_at = started + seconds, started + MAX_OVERRUN * seconds
    interval = num_workers / rate if rate else 0.0

    def is_due() -> bool:
        now = time.monotonic()
        return now < stop_at or (now < give_up_at and tally.total() < min_requests)

    def worker(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        turn = started + index * interval / num_workers
        while is_due():
            time.sleep(max(0.0, turn - time.monotonic()))
            turn = max(turn, time.monotonic()) + interval  # after a slow request, no burst to catch up
            run = rng.choices([k for k, _ in kinds], weights=[w for _, w in kinds])[0]
            try:
                run(url, rng, tally)
            except Exception as exc:  # a client-side failure is a finding, not a reason to stop
                tally.add("client-error", f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(num_workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def format_figures(before: dict[str, ProcStat], after: dict[str, ProcStat], minutes: float | None = None,
                   num_requests: int | None = None) -> str:
    """A table of each process's RSS and threads before and after; with the soak's length and request
    count, its growth per minute and per request too. Growth is of the private RSS (RSS less shared
    memory); the shared memory (the Python backend's pools) is shown beside it."""
    lines = [f"{'process':<14} {'pid':>7} {'RSS warm MB':>12} {'RSS after MB':>13} {'growth MB':>10} "
             f"{'MB/min':>7} {'kB/request':>11} {'shm warm/after MB':>18} {'threads before/after':>21}"]
    for name, first in before.items():
        last = after.get(name)
        if last is None:
            lines.append(f"{name:<14} {first.pid:>7} gone")
            continue
        growth_kb = last.private_kb - first.private_kb
        per_minute = f"{growth_kb / 1024 / minutes:.2f}" if minutes else "-"
        per_request = f"{growth_kb / num_requests:.2f}" if num_requests else "-"
        shm = f"{first.shmem_kb / 1024:.1f}/{last.shmem_kb / 1024:.1f}"
        threads = f"{first.num_threads}/{last.num_threads}"
        lines.append(f"{name:<14} {first.pid:>7} {first.rss_kb / 1024:>12.1f} {last.rss_kb / 1024:>13.1f} "
                     f"{growth_kb / 1024:>10.1f} {per_minute:>7} {per_request:>11} {shm:>18} {threads:>21}")
    return "\n".join(lines)


def peak_rss_while(server_pid: int, work, period_s: float = 1.0) -> dict[str, tuple[int, int]]:
    """Run `work()`; the highest private and shared-memory RSS (kB) of each server process seen meanwhile."""
    peak: dict[str, tuple[int, int]] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(period_s):
            for name, stat in snapshot(server_pid).items():
                private, shmem = peak.get(name, (0, 0))
                peak[name] = (max(private, stat.private_kb), max(shmem, stat.shmem_kb))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        work()
    finally:
        done.set()
        sampler.join()
    return peak


def with_peak(stat: ProcStat, peak: tuple[int, int] | None) -> ProcStat:
    """`stat` with its private and shared-memory RSS raised to their peaks."""
    private, shmem = peak or (0, 0)
    shmem = max(shmem, stat.shmem_kb)
    return replace(stat, rss_kb=max(private, stat.private_kb) + shmem, shmem_kb=shmem)


def soak(url: str, server_pid: int, minutes: float, warm_up_s: float, num_workers: int, seed: int,
         settle_s: float = 8.0, log=print, kinds=PLAIN_KINDS,
         rate: float | None = None) -> tuple[dict, dict, SoakTally]:
    """Warm up, take figures, soak, let the server settle, take figures again. The warm-up runs closed loop for
    `warm_up_s`, and on until it has served as many requests as the soak will at `rate`; the soak runs closed loop
    too, or at most `rate` requests a second (`run_workers`).

    The figures before are each process's peak RSS during the warm-up, with its pid and thread
    count once the warm-up has settled: the peaks of the heaviest load, whatever the soak's rate."""
    soak_requests = round(minutes * 60 * rate) if rate else 0  # at most, at that rate: the warm-up serves as many
    peak = peak_rss_while(server_pid, lambda: run_workers(url, warm_up_s, num_workers, seed, SoakTally(), kinds,
                                                          min_requests=soak_requests))
    time.sleep(settle_s)  # finished streams' BLS iterators are held a few seconds before they are freed
    before = {name: with_peak(stat, peak.get(name)) for name, stat in snapshot(server_pid).items()}
    tally = SoakTally()
    run_workers(url, minutes * 60, num_workers, seed + 1, tally, kinds, rate)
    time.sleep(settle_s)
    after = snapshot(server_pid)
    log(format_figures(before, after, minutes, sum(tally.counts.values())))
    log(f"requests: {dict(tally.counts)}; problems: {len(tally.problems)}")
    for problem in tally.problems[:20]:
        log(f"  {problem}")
    return before, after, tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--warm-up", type=float, default=30.0,
                        help="seconds of load before the first figures (with --rate: and on until it served as many "
                             f"requests as the soak will, at most {MAX_OVERRUN:g}x these seconds)")
    parser.add_argument("--workers", type=int, default=4, help="concurrent clients")
    parser.add_argument("--rate", type=float,
                        help="requests a second in all during the soak, spread over the clients (default: closed "
                             "loop, each client starts its next request as its last ends; the warm-up always is)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--url", help="gRPC HOST:PORT of a running server (default: start one)")
    parser.add_argument("--server-pid", type=int, help="tritonserver's pid, with --url")
    parser.add_argument("--clone", action="store_true",
                        help=f"a fifth of the requests clone a reference's voice (the server's model must clone; "
                             f"without --url: {CLONING_PRESET})")
    parser.add_argument("--audio-in", action="store_true",
                        help=f"audio-in sessions streamed at real time, a fifth left mid-input (the server's model "
                             f"must take input audio; without --url: {AUDIO_IN_PRESET})")
    args = parser.parse_args(argv)
    if args.clone and args.audio_in:
        parser.error("--clone and --audio-in are different models' mixes: choose one")
    if args.rate is not None and not args.rate > 0:
        parser.error(f"--rate must be > 0 requests a second, got {args.rate}")
    if (args.url is None) != (args.server_pid is None):
        parser.error("--url and --server-pid go together")
    if args.url:
        return _soak_server(args.url, args.server_pid, args)
    return _soak_own_server(args)


def _soak_server(url: str, server_pid: int, args) -> int:
    """The exit status of a soak of a running server; with --clone, its voice registered first."""
    if args.clone:
        register_soak_voice(url)
    kinds = CLONING_KINDS if args.clone else AUDIO_IN_KINDS if args.audio_in else PLAIN_KINDS
    tally = soak(url, server_pid, args.minutes, args.warm_up, args.workers, args.seed, kinds=kinds,
                 rate=args.rate)[2]
    return 1 if tally.problems else 0


def _soak_own_server(args) -> int:
    from server.compare import free_ports
    from server.serve import ServeConfig, Server
    from server.triton_launch import Ports
    http, grpc, metrics = free_ports(3)
    log_path = Path(tempfile.mkstemp(prefix="voxlane-soak-", suffix=".log")[1])
    config = ServeConfig(ports=Ports(http, grpc, metrics))
    if args.clone or args.audio_in:
        config = replace(config, model=CLONING_PRESET if args.clone else AUDIO_IN_PRESET)
    with Server(config, log_path=log_path) as server:
        print(f"server ready on {server.grpc_url}; its log: {log_path}", flush=True)
        return _soak_server(server.grpc_url, server.process.process.pid, args)


if __name__ == "__main__":
    sys.exit(main())
