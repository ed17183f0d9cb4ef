"""The `voxlane` command line against the test server."""
from __future__ import annotations

import subprocess
import sys
import wave


def test_say_writes_a_valid_wav(url, tmp_path):
    out = tmp_path / "hello.wav"
    done = subprocess.run([sys.executable, "-m", "server.cli", "say", "Hello from the command line.",
                           "-o", str(out), "--url", url, "--seed", "1", "--max-audio-seconds", "1.2"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ttfa" in done.stdout and "chunks" in done.stdout
    with wave.open(str(out)) as wav:
        assert wav.getframerate() == 24000 and wav.getnchannels() == 1 and wav.getsampwidth() == 2
        assert 0 < wav.getnframes() <= 15 * 1920


def test_say_reports_server_errors(url, tmp_path):
    done = subprocess.run([sys.executable, "-m", "server.cli", "say", "Hi.", "--voice", "nobody",
                           "-o", str(tmp_path / "x.wav"), "--url", url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "nobody" in done.stderr
    assert not (tmp_path / "x.wav").exists()


def test_say_with_no_server_names_the_unreachable_server(tmp_path):
    from server.compare import free_ports
    url = f"127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    done = subprocess.run([sys.executable, "-m", "server.cli", "say", "Hi.", "-o", str(tmp_path / "x.wav"),
                           "--url", url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"cannot reach the server at {url}" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "x.wav").exists()


def say(url: str, out, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", "say", "The peers' fields, from the command line.",
                           "-o", str(out), "--url", url, "--seed", "3", "--max-audio-seconds", "0.8", *flags],
                          capture_output=True, text=True, timeout=120)


def test_say_passes_language_instructions_and_non_streaming_mode_to_the_prompt(url, tmp_path):
    """Each flag reaches the model: the same seed speaks other audio once it changes the prompt."""
    outputs = {}
    for name, flags in {"plain": (), "language": ("--language", "English"),
                        "instructions": ("--instructions", "Whisper, slowly."),
                        "non_streaming": ("--non-streaming-mode",)}.items():
        done = say(url, tmp_path / f"{name}.wav", *flags)
        assert done.returncode == 0, (name, done.stderr)
        with wave.open(str(tmp_path / f"{name}.wav")) as wav:
            outputs[name] = wav.readframes(wav.getnframes())
    for name in ("language", "instructions", "non_streaming"):
        assert outputs[name] != outputs["plain"], f"--{name} changed nothing"


def test_say_names_a_language_the_model_has_not(url, tmp_path):
    done = say(url, tmp_path / "x.wav", "--language", "Klingon")
    assert done.returncode == 1 and "language" in done.stderr and "klingon" in done.stderr.lower(), done.stderr
    assert not (tmp_path / "x.wav").exists()


def test_say_prints_word_timestamps_and_speeds_up_the_audio(url, tmp_path):
    """--timestamps prints one line per word (start, end, word) after the report; --speed 2 halves the length."""
    text = "The peers' fields, from the command line."
    plain = say(url, tmp_path / "plain.wav", "--timestamps", "--max-audio-seconds", "20")
    assert plain.returncode == 0, plain.stderr
    lines = [line.split(maxsplit=2) for line in plain.stdout.splitlines()[1:]]
    assert [word for _, _, word in lines] == text.split()
    assert all(float(start) <= float(end) for start, end, _ in lines)
    fast = say(url, tmp_path / "fast.wav", "--speed", "2")
    slow = say(url, tmp_path / "slow.wav")
    assert fast.returncode == slow.returncode == 0, fast.stderr
    with wave.open(str(tmp_path / "fast.wav")) as a, wave.open(str(tmp_path / "slow.wav")) as b:
        assert abs(a.getnframes() / b.getnframes() - 0.5) < 0.03
