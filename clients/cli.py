"""The client side of the `voxlane` command line: say, bench, plot and voices. `server/cli.py` adds them to
its own commands, so `voxlane` stays one command while this package never imports the server's."""
from __future__ import annotations

import argparse
import math
import sys
import wave
from pathlib import Path
from typing import Callable

from clients.bench.cli import add_commands, bench_config
from clients.voices import add_voices_command


def add_client_commands(commands) -> dict[str, Callable[[argparse.Namespace], int]]:
    """Add say, bench, plot and voices to `voxlane`'s subparsers; return their handlers by name."""
    _add_say(commands.add_parser("say", help="speak TEXT through a running server into a WAV file"))
    handlers = {"say": _say, **add_commands(commands), **add_voices_command(commands)}
    handlers["bench"] = _with_perf_analyzer(handlers["bench"])
    return handlers


def _with_perf_analyzer(bench):
    """`voxlane bench --export-perf-analyzer` / `--from-perf-analyzer`: the same plan, replayed or read by
    Triton's perf_analyzer (clients/perf_analyzer builds on clients/bench, so the hand-over is made here)."""
    def run(args: argparse.Namespace) -> int:
        if not (args.export_perf_analyzer or args.from_perf_analyzer):
            return bench(args)
        config = bench_config(args, args.url)
        if config.is_session:
            raise ValueError("--text-rate and --audio-in-rate send sessions of pieces; perf_analyzer replays "
                             "whole-text requests only")
        from clients.perf_analyzer.cli import cross_check
        return cross_check(config, args.export_perf_analyzer, args.from_perf_analyzer)
    return run


def _add_say(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", nargs="?", default=None, help="what to speak (none with --audio-in)")
    parser.add_argument("-o", "--output", default="out.wav")
    parser.add_argument("--url", default="localhost:8001")
    parser.add_argument("--voice", default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--max-audio-seconds", type=float, default=None,
                        help="the audio cap (the server's default: 60 s, or more for a long text; with --audio-in: "
                             "the file's length and a second)")
    parser.add_argument("--language", default=None,
                        help="the model's language to speak in (Qwen3-TTS: e.g. English, Chinese; default: auto)")
    parser.add_argument("--instructions", default=None,
                        help="a style or emotion to speak with (a model with an instruct input: Qwen3-TTS CustomVoice)")
    parser.add_argument("--non-streaming-mode", action="store_true",
                        help="put the whole text in the prompt before the first frame (Qwen3-TTS whole-text "
                             "requests; default: one text token per frame)")
    parser.add_argument("--speed", type=float, default=None,
                        help="the audio's tempo, 0.25 to 4 (time-stretched on the server, pitch kept; default 1)")
    parser.add_argument("--timestamps", action="store_true",
                        help="print each word with its start and end in the audio (approximate: the server's word "
                             "clock)")
    parser.add_argument("--stream-text", action="store_true",
                        help="send TEXT word by word as a streaming-text session (the server speaks while it comes)")
    parser.add_argument("--words-per-s", type=float, default=3.0, help="with --stream-text: the pace of the words")
    parser.add_argument("--ref-audio", type=Path, default=None,
                        help="clone the voice of this PCM WAV file (0.5 to 60 s; a model with a voice encoder)")
    parser.add_argument("--ref-text", default=None, help="the transcript of --ref-audio (in-context cloning needs it)")
    parser.add_argument("--x-vector-only", action="store_true",
                        help="clone from --ref-audio's speaker embedding alone (no --ref-text needed)")
    parser.add_argument("--audio-in", type=Path, default=None,
                        help="stream this PCM WAV file in at real time and write what the model makes of it (a model "
                             "that listens while it speaks, tse-*: the --enroll speaker's speech); no TEXT")
    parser.add_argument("--enroll", type=Path, default=None,
                        help="with --audio-in: a PCM WAV clip of the target speaker (0.5 to 60 s)")
    parser.add_argument("--piece-ms", type=float, default=80.0,
                        help="with --audio-in: the pieces the file is sent in, each when its audio would have played")


def _say(args: argparse.Namespace) -> int:
    from clients.stream import synthesize
    from clients.text_stream import speak_streaming_text
    if args.audio_in is not None:
        return _say_audio_in(args)
    if args.text is None:
        raise ValueError("say needs TEXT (or --audio-in with --enroll)")
    settings = dict(voice=args.voice, seed=args.seed, temperature=args.temperature,
                    max_audio_seconds=args.max_audio_seconds, language=args.language,
                    instructions=args.instructions, non_streaming_mode=True if args.non_streaming_mode else None,
                    speed=args.speed, timestamps="word" if args.timestamps else None, **_reference(args))
    result = _streamed(lambda: speak_streaming_text(args.url, _paced_words(args.text, args.words_per_s), **settings)
                       if args.stream_text else synthesize(args.url, args.text, **settings))
    if result is None:
        return 1
    report(result, args.output)
    for word in result.words or ():
        print(f"{word['start']:8.3f} {word['end']:8.3f}  {word['word']}")
    return 0


def _streamed(stream, partial_output: str | None = None):
    """`stream()`'s result, or None once the reason it failed is printed (the server unreachable, or its error).
    With `partial_output`, the audio that came before a server error is written there (a session's)."""
    from clients.stream import ServerUnreachable, StreamError
    try:
        return stream()
    except ServerUnreachable as exc:
        print(f"voxlane: {exc} (is `voxlane serve` running there? --url picks the server)", file=sys.stderr)
    except StreamError as exc:
        print(f"voxlane: server error: {exc}", file=sys.stderr)
        if partial_output is not None and exc.partial is not None and exc.partial.chunks:
            report(exc.partial, partial_output, what="the audio before the error: ")
    return None


def _say_audio_in(args: argparse.Namespace) -> int:
    """`say --audio-in FILE --enroll FILE`: an audio-in session, the file sent at real time in pieces."""
    from clients.audio_stream import stream_audio_in
    from clients.stream import read_wav
    if args.text is not None or args.enroll is None or args.ref_audio is not None:
        raise ValueError("--audio-in takes --enroll (the target speaker) and no TEXT or --ref-audio")
    try:
        audio, rate = read_wav(args.audio_in)
        enroll, enroll_rate = read_wav(args.enroll)
    except (OSError, EOFError, wave.Error) as exc:
        raise ValueError(f"--audio-in / --enroll: not a readable PCM WAV file ({exc})") from None
    piece = max(1, round(rate * args.piece_ms / 1000))
    pieces = [audio[start:start + piece] for start in range(0, audio.size, piece)]
    cap = args.max_audio_seconds if args.max_audio_seconds is not None else audio_in_cap_s(audio.size / rate)
    result = _streamed(lambda: stream_audio_in(
        args.url, pieces, rate, enroll, enroll_rate, piece_gap_s=args.piece_ms / 1000, seed=args.seed,
        temperature=args.temperature, max_audio_seconds=cap, timeout_s=120 + audio.size / rate),
        partial_output=args.output)
    if result is None:
        return 1
    for ended in result.piece_errors:
        print(f"voxlane: a piece was refused: {ended.message}", file=sys.stderr)
    report(result, args.output)
    return 0


def audio_in_cap_s(input_s: float) -> float:
    """`say --audio-in`'s `max_audio_seconds` when none is given: the file's length and a second more (the
    output answers the input frame for frame), so that no input is cut by the server's default cap."""
    return float(math.ceil(input_s)) + 1.0


def _reference(args: argparse.Namespace) -> dict:
    """The reference inputs of `say` (a voice to clone), read from --ref-audio's WAV file."""
    from clients.stream import read_wav
    if args.ref_audio is None:
        if args.ref_text is not None or args.x_vector_only:
            raise ValueError("--ref-text and --x-vector-only need --ref-audio")
        return {}
    try:
        audio, rate = read_wav(args.ref_audio)
    except (OSError, EOFError, wave.Error) as exc:
        raise ValueError(f"--ref-audio {args.ref_audio}: not a readable PCM WAV file ({exc})") from None
    return dict(ref_audio=audio, ref_sample_rate=rate, ref_text=args.ref_text,
                x_vector_only=True if args.x_vector_only else None)


def _paced_words(text: str, words_per_s: float):
    """`text` word by word (each word with the space before it), `words_per_s` of them a second."""
    import time
    for i, word in enumerate(text.split(" ")):
        if i:
            time.sleep(1.0 / words_per_s)
        yield word if i == 0 else " " + word


def report(result, output: str, what: str = "") -> None:
    """Write `result`'s audio to `output` and say in one line what came (`say` and `demo`)."""
    if not result.chunks:
        print("voxlane: the model stopped before producing audio", file=sys.stderr)
        return
    result.write_wav(output)
    wall = result.chunks[-1].arrival_s
    lanes = ",".join(sorted({c.lane for c in result.chunks}))
    print(f"wrote {what}{output}: ttfa {result.ttfa_s * 1e3:.1f} ms, {len(result.chunks)} chunks, "
          f"{result.audio_seconds:.2f} s of audio at {result.sample_rate} Hz, "
          f"real-time factor {wall / max(result.audio_seconds, 1e-9):.3f}, lanes {lanes}")
