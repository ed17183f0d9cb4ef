"""Voice cloning (issue 17) through a real tritonserver: a reference's voice streams in order over gRPC (x-vector
and in-context), reproducibly; a bad reference is refused at once while another stream plays on; a model that
takes no reference audio (the default CustomVoice preset) says so. The reference audio is synthesised here."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
import wave

import numpy as np
import pytest

from clients.stream import StreamError, read_wav, synthesize
from clients.text_stream import speak_streaming_text
from protocol.reasons import EndReason
from tests.e2e.conftest import start_server
from tests.e2e.test_streaming import PATH_ROUNDING
from tests.e2e.test_text_stream import words
from tests.reference_audio import voiced

BASE_PRESET = "qwen3-tts-tiny-base"
TEXT = "Get the trust fund to the bank early."
RATE = 16000  # the reference's own rate: the server resamples it to its encoder's (24 kHz)
REFERENCE = voiced(2.0, RATE, f0=140.0)
REF_TEXT = "A reference sentence, read aloud."
CLONES = {"x_vector": dict(x_vector_only=True), "in_context": dict(ref_text=REF_TEXT)}


def has_base_preset() -> bool:
    from backend_python.models import registry
    return BASE_PRESET in registry.preset_names()


@pytest.fixture(scope="module")
def base_url(model_cache, tmp_path_factory) -> str:
    if not has_base_preset():
        pytest.skip(f"the {BASE_PRESET} preset (a Qwen3-TTS Base model with a voice encoder) is not in the registry")
    server = start_server(BASE_PRESET, tmp_path_factory)
    yield server.grpc_url
    server.stop(grace_s=0)


def clone(url: str, seconds: float = 0.8, seed: int = 1, reference: np.ndarray = REFERENCE, rate: int = RATE,
          **inputs):
    return synthesize(url, TEXT, seed=seed, max_audio_seconds=seconds, ignore_eos=True, ref_audio=reference,
                      ref_sample_rate=rate, **inputs)


@pytest.mark.parametrize("kind", CLONES)
def test_a_cloned_voice_streams_in_order(base_url, kind):
    result = clone(base_url, seconds=1.6, **CLONES[kind])
    assert [c.index for c in result.chunks] == list(range(len(result.chunks))) and len(result.chunks) >= 3
    assert result.sample_rate == 24000 and result.audio.size == 20 * 1920  # 1.6 s at 12.5 Hz, 1920 samples a frame
    assert np.isfinite(result.audio).all() and np.abs(result.audio).max() > 0


@pytest.mark.parametrize("kind", CLONES)
def test_the_same_seed_and_reference_give_the_same_audio(base_url, kind):
    first, second = clone(base_url, seed=7, **CLONES[kind]), clone(base_url, seed=7, **CLONES[kind])
    if [c.lane for c in first.chunks] == [c.lane for c in second.chunks]:
        np.testing.assert_array_equal(first.audio, second.audio)
    else:  # routed differently (by timing): the same frames, decoded by the two paths
        np.testing.assert_allclose(first.audio, second.audio, rtol=0, atol=PATH_ROUNDING)


def test_the_reference_changes_the_voice(base_url):
    """The encoder's tensors reach the prompt: another reference, or the same one in context, gives other audio."""
    low = clone(base_url, seed=3, x_vector_only=True)
    high = clone(base_url, seed=3, x_vector_only=True, reference=voiced(2.0, RATE, f0=260.0))
    in_context = clone(base_url, seed=3, ref_text=REF_TEXT)
    assert not np.allclose(low.audio, high.audio, atol=1e-3)
    assert not np.allclose(low.audio, in_context.audio, atol=1e-3)


def test_a_base_model_without_a_reference_says_it_needs_one(base_url):
    with pytest.raises(StreamError, match="no preset voices") as refused:
        synthesize(base_url, TEXT, seed=1, max_audio_seconds=0.4)
    assert (refused.value.ended.param, refused.value.ended.code) == ("ref_audio", "missing_ref_audio")


BAD_REFERENCES = [
    pytest.param(dict(ref_audio=np.zeros(0, np.float32), ref_sample_rate=RATE, x_vector_only=True),
                 "ref_audio", "empty_ref_audio", id="empty"),
    pytest.param(dict(ref_audio=REFERENCE[:RATE // 5], ref_sample_rate=RATE, x_vector_only=True),
                 "ref_audio", "ref_audio_too_short", id="too-short"),
    pytest.param(dict(ref_audio=voiced(61.0, 8000), ref_sample_rate=8000, x_vector_only=True),
                 "ref_audio", "ref_audio_too_long", id="too-long"),
    pytest.param(dict(ref_audio=np.where(np.arange(REFERENCE.size) == 500, np.nan, REFERENCE).astype(np.float32),
                      ref_sample_rate=RATE, x_vector_only=True), "ref_audio", "ref_audio_not_finite", id="nan"),
    pytest.param(dict(ref_audio=REFERENCE * np.float32(4.0), ref_sample_rate=RATE, x_vector_only=True),
                 "ref_audio", "ref_audio_out_of_range", id="out-of-range"),
    pytest.param(dict(ref_audio=REFERENCE * np.float32(1e-5), ref_sample_rate=RATE, x_vector_only=True),
                 "ref_audio", "ref_audio_silent", id="silent"),
    pytest.param(dict(ref_audio=REFERENCE, x_vector_only=True), "ref_sample_rate", "missing_ref_sample_rate",
                 id="no-rate"),
    pytest.param(dict(ref_audio=REFERENCE, ref_sample_rate=96000, x_vector_only=True), "ref_sample_rate",
                 "unsupported_ref_sample_rate", id="bad-rate"),
    pytest.param(dict(ref_text=REF_TEXT), "ref_text", "missing_ref_audio", id="text-without-audio"),
    pytest.param(dict(ref_audio=REFERENCE, ref_sample_rate=RATE), "ref_text", "missing_ref_text",
                 id="in-context-without-text"),
]


@pytest.mark.parametrize("inputs, param, code", BAD_REFERENCES)
def test_a_bad_reference_is_refused_at_once_and_another_stream_plays_on(base_url, inputs, param, code):
    playing, errors = [], []
    other = threading.Thread(target=lambda: _run(playing, errors, base_url))
    other.start()
    time.sleep(0.3)  # the other stream is under way
    started = time.perf_counter()
    with pytest.raises(StreamError) as refused:
        synthesize(base_url, TEXT, seed=1, **inputs)
    assert time.perf_counter() - started < 1.0
    ended = refused.value.ended
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, param, code), ended
    other.join(60)
    assert errors == [] and [c.index for c in playing[0].chunks] == list(range(len(playing[0].chunks)))
    assert playing[0].audio.size == 25 * 1920


def _run(results: list, errors: list, url: str) -> None:
    try:
        results.append(clone(url, seconds=2.0, x_vector_only=True))
    except Exception as exc:  # reported by the test's own assertion
        errors.append(exc)


def test_say_clones_the_voice_of_a_wav_file(base_url, tmp_path):
    reference, out = tmp_path / "reference.wav", tmp_path / "cloned.wav"
    with wave.open(str(reference), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes((REFERENCE * 32767).astype("<i2").tobytes())
    audio, rate = read_wav(reference)
    assert rate == RATE and np.abs(audio - REFERENCE).max() < 1e-4
    done = subprocess.run([sys.executable, "-m", "server.cli", "say", TEXT, "-o", str(out), "--url", base_url,
                           "--seed", "1", "--max-audio-seconds", "0.8", "--ref-audio", str(reference),
                           "--ref-text", REF_TEXT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with wave.open(str(out)) as wav:
        assert wav.getframerate() == 24000 and 0 < wav.getnframes() <= 10 * 1920


@pytest.mark.parametrize("kind", CLONES)
def test_a_model_without_a_voice_encoder_refuses_a_reference(url, kind):
    """The default preset (CustomVoice) takes no reference audio: its voice_encoder lane says so, at once."""
    started = time.perf_counter()
    with pytest.raises(StreamError, match="cannot take reference audio") as refused:
        clone(url, **CLONES[kind])
    assert time.perf_counter() - started < 1.0
    ended = refused.value.ended
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, "ref_audio",
                                                       "reference_unsupported")
    assert synthesize(url, TEXT, seed=2, max_audio_seconds=0.4, ignore_eos=True).chunks


@pytest.fixture
def csm_url(family) -> str:
    """The family contract's csm-tiny server (each test that takes it says so: `ON_CSM`)."""
    return family.url


ON_CSM = pytest.mark.parametrize("family", ["csm-tiny"], indirect=True)


@ON_CSM
def test_csm_clones_in_context_for_a_whole_text_and_a_streamed_one(csm_url):
    """CSM hears the reference as an earlier turn; a session takes the reference on its first request."""
    whole = clone(csm_url, seconds=1.6, ref_text=REF_TEXT)
    assert [c.index for c in whole.chunks] == list(range(len(whole.chunks))) and whole.audio.size == 20 * 1920
    session = dict(seed=1, max_audio_seconds=2.0, ignore_eos=True)
    text = "Get the trust fund to the bank early. Then wait."
    cloned = speak_streaming_text(csm_url, words(text, pause_s=0.05), ref_audio=REFERENCE, ref_sample_rate=RATE,
                                  ref_text=REF_TEXT, **session)
    assert cloned.piece_errors == [] and [c.index for c in cloned.chunks] == list(range(len(cloned.chunks)))
    assert cloned.audio.size == 25 * 1920
    plain = speak_streaming_text(csm_url, words(text, pause_s=0.05), **session)
    assert not np.allclose(cloned.audio, plain.audio, atol=1e-3)  # the session's reference reached its prompt


@ON_CSM
def test_csm_refuses_an_x_vector_reference_by_name(csm_url):
    with pytest.raises(StreamError, match="x_vector_only") as refused:
        clone(csm_url, x_vector_only=True)
    assert (refused.value.ended.reason, refused.value.ended.param) == (EndReason.REFUSED_BAD_INPUT, "ref_audio")


def test_a_real_speech_clip_clones_through_say_as_through_grpc(base_url, tmp_path):
    """Real speech (a Piper voice, 22.05 kHz: resampled on the server) as the reference: `voxlane say` writes
    what a gRPC request with the same clip and seed streams."""
    from clients.reference_clip import write_clip

    transcript = "The birch canoe slid on the smooth planks."
    clip, out = write_clip(transcript, tmp_path / "speech.wav"), tmp_path / "cloned.wav"
    speech, rate = read_wav(clip)
    assert rate == 22050 and speech.size > rate and np.abs(speech).max() > 0.1  # a second of audible speech
    done = subprocess.run([sys.executable, "-m", "server.cli", "say", TEXT, "-o", str(out), "--url", base_url,
                           "--seed", "4", "--max-audio-seconds", "0.8", "--ref-audio", str(clip),
                           "--ref-text", transcript], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said, said_rate = read_wav(out)
    # the request `say` sent: no `ignore_eos` (which `clone` sets): a blocked end token may change samples from frame 2
    streamed = synthesize(base_url, TEXT, seed=4, max_audio_seconds=0.8, ref_audio=speech, ref_sample_rate=rate,
                          ref_text=transcript)
    assert said_rate == 24000 and said.size == streamed.audio.size > 0
    np.testing.assert_allclose(said, streamed.audio, rtol=0, atol=PATH_ROUNDING + 1.5 / 32767)  # PCM16 in the file


def test_a_streamed_text_clones_from_the_speaker_embedding_and_in_context_needs_the_whole_text(base_url):
    reference = dict(ref_audio=REFERENCE, ref_sample_rate=RATE)
    settings = dict(seed=2, max_audio_seconds=0.8, ignore_eos=True)
    whole = synthesize(base_url, TEXT, x_vector_only=True, **reference, **settings)
    streamed = speak_streaming_text(base_url, words(TEXT, pause_s=0.05), x_vector_only=True, **reference, **settings)
    assert streamed.piece_errors == [] and [c.index for c in streamed.chunks] == [c.index for c in whole.chunks]
    np.testing.assert_allclose(streamed.audio, whole.audio, rtol=0, atol=PATH_ROUNDING)
    with pytest.raises(StreamError) as refused:
        speak_streaming_text(base_url, words(TEXT), ref_text=REF_TEXT, **reference, **settings)
    assert refused.value.ended.reason is EndReason.REFUSED_BAD_INPUT and "x_vector_only" in refused.value.ended.message
