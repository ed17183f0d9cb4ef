"""Voice cloning's cost on a running server: the voice encoder lane's latency per reference length, and time to
first audio for a voice given inline, a registered voice and (on a second server) a preset voice.

    python -m tools.voice_latency --base-url HOST:8001 [--preset-url HOST:8011] [--out voice_latency.json]

One request at a time on an idle server; the conditions take turns so that drift hits them alike. The
reference is a synthesised voiced signal at the encoder's own 24 kHz (no resampling). Prints a table and
writes the raw times as JSON.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from clients.stream import synthesize

RATE = 24000
TEXT = "Get the trust fund to the bank early."
REF_TEXT = "A voice to clone, read aloud."
SPEAK = dict(seed=1, max_audio_seconds=1.0, ignore_eos=True)


def voiced(seconds: float, rate: int = RATE, f0: float = 140.0) -> np.ndarray:
    """[n] float32: a few harmonics of `f0` with vibrato under a syllable-like envelope, peak 0.5."""
    t = np.arange(round(seconds * rate)) / rate
    phase = 2 * np.pi * f0 * t + 3.0 * np.sin(2 * np.pi * 5.0 * t)
    signal = sum(np.sin(k * phase) / k for k in (1, 2, 3, 4, 5)) * (0.55 + 0.45 * np.sin(2 * np.pi * 3.0 * t) ** 2)
    return (0.5 * signal / np.max(np.abs(signal))).astype(np.float32)


def _input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    kind = {"O": "BYTES", "f": "FP32", "i": "INT32", "b": "BOOL"}[array.dtype.kind]
    tensor = grpcclient.InferInput(name, list(array.shape), kind)
    tensor.set_data_from_numpy(array)
    return tensor


def encode_ms(client: grpcclient.InferenceServerClient, audio: np.ndarray, x_vector_only: bool) -> float:
    """One direct call to the voice_encoder lane (batch of one), milliseconds from send to answer."""
    inputs = [_input("ref_audio", audio[None]), _input("ref_sample_rate", np.array([[RATE]], dtype=np.int32)),
              _input("x_vector_only", np.array([[x_vector_only]], dtype=np.bool_))]
    started = time.perf_counter()
    client.infer("voice_encoder", inputs)
    return (time.perf_counter() - started) * 1e3


def register(client: grpcclient.InferenceServerClient, name: str, audio: np.ndarray, ref_text: str | None) -> None:
    values = {"action": np.array([b"register"], dtype=np.object_), "name": np.array([name.encode()], dtype=np.object_),
              "ref_audio": audio, "ref_sample_rate": np.array([RATE], dtype=np.int32)}
    if ref_text is None:
        values["x_vector_only"] = np.array([True])
    else:
        values["ref_text"] = np.array([ref_text.encode()], dtype=np.object_)
    client.infer("voice_registry", [_input(k, v) for k, v in values.items()])


def encoder_table(url: str, lengths: list[float], reps: int) -> dict:
    client = grpcclient.InferenceServerClient(url)
    table = {}
    for seconds in lengths:
        audio = voiced(seconds)
        for x_vector_only in (True, False):
            encode_ms(client, audio, x_vector_only)  # a new length: warm it
            key = f"{seconds:g}s {'x-vector' if x_vector_only else 'in-context'}"
            table[key] = [encode_ms(client, audio, x_vector_only) for _ in range(reps)]
    return table


def ttfa_table(base_url: str, preset_url: str | None, reps: int) -> dict:
    """TTFA in ms per condition, taking turns."""
    reference = voiced(5.0)
    client = grpcclient.InferenceServerClient(base_url)
    stamp = time.strftime("%H%M%S")
    register(client, f"bench-xv-{stamp}", reference, None)
    register(client, f"bench-icl-{stamp}", reference, REF_TEXT)
    conditions = {
        "inline x-vector (5 s)": (base_url, dict(ref_audio=reference, ref_sample_rate=RATE, x_vector_only=True)),
        "inline in-context (5 s)": (base_url, dict(ref_audio=reference, ref_sample_rate=RATE, ref_text=REF_TEXT)),
        "registered x-vector": (base_url, dict(voice=f"bench-xv-{stamp}")),
        "registered in-context": (base_url, dict(voice=f"bench-icl-{stamp}")),
    }
    if preset_url:
        conditions["preset voice (CustomVoice)"] = (preset_url, {})
    times = {name: [] for name in conditions}
    for round_ in range(reps + 2):
        for name, (url, extra) in conditions.items():
            result = synthesize(url, TEXT, **SPEAK, **extra)
            if round_ >= 2:  # two warm-up rounds
                times[name].append(result.ttfa_s * 1e3)
    return times


def summary(times: dict) -> list[str]:
    rows = ["| condition | p50 ms | p90 ms | n |", "| --- | --- | --- | --- |"]
    for name, values in times.items():
        rows.append(f"| {name} | {np.percentile(values, 50):.1f} | {np.percentile(values, 90):.1f} | {len(values)} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="a server of a model that clones (a Base preset)")
    parser.add_argument("--preset-url", default=None, help="a server of the same shape with preset voices")
    parser.add_argument("--lengths", type=float, nargs="+", default=[1, 5, 15, 30, 60])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("voice_latency.json"))
    args = parser.parse_args(argv)
    encoder = encoder_table(args.base_url, args.lengths, args.reps)
    print("voice_encoder lane, one reference at a time (client to answer):", *summary(encoder), sep="\n", flush=True)
    ttfa = ttfa_table(args.base_url, args.preset_url, args.reps)
    print("time to first audio, idle server, one request at a time:", *summary(ttfa), sep="\n", flush=True)
    args.out.write_text(json.dumps({"encoder_ms": encoder, "ttfa_ms": ttfa}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
