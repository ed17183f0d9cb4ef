"""Hostile reference files: any channel count decodes (FFmpeg's planar frames crashed PyAV from 8 channels on),
and a file whose header or audio runs past the reference limit is refused before it becomes samples."""
from __future__ import annotations

import io
import subprocess
import sys
import wave

import numpy as np
import pytest

from audio.decoding import AudioFileError, decode_reference
from protocol.reference import ReferenceLimits

MAX_SECONDS = ReferenceLimits().max_ref_audio_s


def pcm_wav(channels: int, seconds: float, rate: int = 16_000) -> tuple[bytes, np.ndarray]:
    """A 16-bit WAV of `channels` channels, and its samples [n, channels] as float32."""
    pcm = (np.random.default_rng(channels).uniform(-0.5, 0.5, (int(seconds * rate), channels)) * 32767).astype(np.int16)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as handle:
        handle.setnchannels(channels)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes(pcm.tobytes())
    return buffer.getvalue(), pcm.astype(np.float32) / 32768


@pytest.mark.parametrize("channels", [1, 2, 8, 9, 64])
def test_any_channel_count_decodes_to_the_channels_mean(channels):
    data, pcm = pcm_wav(channels, 0.5)
    decoded = decode_reference(data)
    assert decoded.sample_rate == 16_000 and decoded.samples.dtype == np.float32
    np.testing.assert_allclose(decoded.samples, pcm.mean(axis=1), atol=1e-6)


def test_an_eight_channel_file_does_not_kill_the_process():
    """The crash was a segfault: run it where it cannot take the test runner with it."""
    data, _ = pcm_wav(8, 0.2)
    code = ("import sys; from audio.decoding import decode_reference; "
            "print(decode_reference(sys.stdin.buffer.read()).samples.size)")
    done = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-500:]
    assert done.stdout.strip() == b"3200"


def test_a_small_file_whose_header_says_700_s_is_refused_from_its_header(monkeypatch):
    """A decode bomb: 700 s of silence compress to a few kB of FLAC; its STREAMINFO says how long it is, and
    nothing is decoded (the decoder is never asked for a frame)."""
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(700 * 8_000, np.int16), 8_000, format="FLAC")
    data = buffer.getvalue()
    assert len(data) < 200_000
    from audio import decoding
    monkeypatch.setattr(decoding, "_decode_mono", lambda *args: pytest.fail("decoded a file refused by its header"))
    with pytest.raises(AudioFileError, match="700.0 s long") as error:
        decode_reference(data)
    assert error.value.code == "audio_too_long"


def test_audio_past_the_limit_is_refused():
    data, _ = pcm_wav(1, MAX_SECONDS + 2, rate=8_000)
    with pytest.raises(AudioFileError) as error:
        decode_reference(data)
    assert error.value.code == "audio_too_long"


def test_a_rate_outside_what_a_reference_may_have_is_refused():
    data, _ = pcm_wav(1, 0.5, rate=4_000)
    with pytest.raises(AudioFileError, match="4000 Hz"):
        decode_reference(data)


def wav_with_header(bits: int, tag: int = 0x0001, rate: int = 16_000, seconds: float = 0.5,
                    extensible_tag: int | None = None) -> bytes:
    """A mono WAV whose `fmt ` chunk says `bits` per sample (format `tag`), with silence sized by whole bytes."""
    import struct
    block = (bits + 7) // 8
    fmt = struct.pack("<HHIIHH", tag, 1, rate, rate * block, block, bits)
    if extensible_tag is not None:  # WAVE_FORMAT_EXTENSIBLE: cbSize, valid bits, channel mask, sub-format GUID
        fmt += struct.pack("<HHI", 22, bits, 4) + struct.pack("<H", extensible_tag) + bytes(14)
    samples = bytes(int(rate * seconds) * block)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(samples)) + samples
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize("bits, tag, extensible", [(3, 0x0001, None), (40, 0x0001, None), (16, 0x0003, None),
                                                   (4, 0xFFFE, 0x0001)])
def test_a_wav_sample_size_its_format_cannot_have_is_refused_by_name(bits, tag, extensible):
    with pytest.raises(AudioFileError, match=f"{bits} bits per sample") as error:
        decode_reference(wav_with_header(bits, tag, extensible_tag=extensible))
    assert error.value.code == "unsupported_audio_format"


@pytest.mark.parametrize("bits", [8, 12, 16, 24, 32])
def test_pcm_wav_of_any_whole_sample_size_decodes(bits):
    decoded = decode_reference(wav_with_header(bits))
    assert decoded.samples.size == 8_000 and decoded.sample_rate == 16_000


FRAME_BYTES = 1 << 16  # one decoded frame and its conversions


def flac(samples: np.ndarray, rate: int) -> bytes:
    import soundfile
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="FLAC")
    return buffer.getvalue()


def test_a_rate_the_server_refuses_is_refused_from_the_header_with_the_servers_code(monkeypatch):
    """59 s of near-silence at 192 kHz is a ~40 kB FLAC that decoded into a 45 MB tensor, crossed Triton and was only
    then refused (the server takes 8-48 kHz): now nothing is decoded, and the code is the server's."""
    data = flac(np.full(59 * 192_000, 3, np.int16), 192_000)
    assert len(data) < 100_000
    from audio import decoding
    monkeypatch.setattr(decoding, "_decode_mono", lambda *args: pytest.fail("decoded a file refused by its header"))
    with pytest.raises(AudioFileError, match="192000 Hz") as error:
        decode_reference(data)
    assert error.value.code == "unsupported_ref_sample_rate"
    assert ReferenceLimits().max_rate == 48_000  # the server's, from the input's table (protocol/tensors.py)


def test_a_longest_reference_decodes_into_one_buffer_of_its_samples():
    """Peak memory per reference: its samples once (11.5 MB for 60 s at 48 kHz), its file once and a frame, where
    the parts and their concatenation held the samples twice."""
    import tracemalloc
    limits = ReferenceLimits()
    data, _ = pcm_wav(1, limits.max_ref_audio_s, rate=limits.max_rate)
    tracemalloc.start()
    try:
        decoded = decode_reference(data, limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    samples_bytes = limits.max_samples(limits.max_rate) * 4
    assert decoded.samples.size == limits.max_samples(limits.max_rate)
    assert peak <= samples_bytes + len(data) + FRAME_BYTES, (peak, samples_bytes)


def test_a_file_whose_header_hides_its_length_is_decoded_no_further_than_the_limit():
    """A FLAC whose STREAMINFO says nothing of its length (0 samples: unknown) and holds 70 s: decoding stops at the
    limit, with at most that in memory, whatever the file claims."""
    import tracemalloc
    limits = ReferenceLimits()
    data = bytearray(flac(np.random.default_rng(0).integers(-300, 300, 70 * 8_000).astype(np.int16), 8_000))
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # STREAMINFO first: its total samples are 36 bits at 21.4
    data[21] &= 0xF0
    data[22:26] = bytes(4)
    tracemalloc.start()
    try:
        with pytest.raises(AudioFileError) as error:
            decode_reference(bytes(data), limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.value.code == "audio_too_long"
    assert peak <= (limits.max_ref_audio_s + 0.5) * 8_000 * 4 + len(data) + FRAME_BYTES, peak
