"""End-to-end streaming through a real tritonserver: order, concurrency, reproducibility."""
from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from clients.stream import build_inputs, synthesize

TEXT = "Get the trust fund to the bank early."
FRAME_RATE = 12.5  # Qwen3-TTS 12 Hz codec frames per second


def test_one_stream_arrives_in_order(url):
    result = synthesize(url, TEXT, seed=3, max_audio_seconds=3.2, ignore_eos=True)
    indices = [c.index for c in result.chunks]
    assert indices == list(range(len(result.chunks)))
    assert all(c.audio.size > 0 and c.audio.dtype == np.float32 for c in result.chunks)
    assert {c.sample_rate for c in result.chunks} == {24000}
    assert all(np.all(np.abs(c.audio) <= 1.0) for c in result.chunks)
    num_frames = round(3.2 * FRAME_RATE)  # ignore_eos: exactly the requested length
    assert result.audio.size == num_frames * 24000 / FRAME_RATE
    assert [c.audio.size // 1920 for c in result.chunks] == [2, 4, 8, 10, 10, 6]  # 40 frames


def test_lanes_first_chunk_urgent(url):
    result = synthesize(url, TEXT, seed=4, max_audio_seconds=2.0, ignore_eos=True)
    assert result.chunks[0].lane == "urgent"
    assert {c.lane for c in result.chunks} <= {"urgent", "background"}


def test_eight_concurrent_streams_complete_in_order(url):
    lengths = [1.0, 1.6, 2.4, 3.2, 1.2, 2.0, 2.8, 0.8]
    with ThreadPoolExecutor(len(lengths)) as pool:
        results = list(pool.map(
            lambda i: synthesize(url, f"{TEXT} Stream {i}.", seed=i, max_audio_seconds=lengths[i],
                                 ignore_eos=True), range(len(lengths))))
    for seconds, result in zip(lengths, results):
        assert [c.index for c in result.chunks] == list(range(len(result.chunks)))
        assert result.audio.size == round(seconds * FRAME_RATE) * 1920


def test_same_seed_same_audio(url):
    first = synthesize(url, TEXT, seed=11, max_audio_seconds=1.6, ignore_eos=True)
    second = synthesize(url, TEXT, seed=11, max_audio_seconds=1.6, ignore_eos=True)
    np.testing.assert_array_equal(first.audio, second.audio)


def lm_tokens(url: str, seed: int, seconds: float = 1.6) -> np.ndarray:
    """Stream `speechlm_lm` directly (it is a decoupled model too) and stack its new frames."""
    client = grpcclient.InferenceServerClient(url=url)
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    client.async_stream_infer("speechlm_lm", build_inputs(TEXT, seed=seed, max_audio_seconds=seconds,
                                                          ignore_eos=True), enable_empty_final_response=True)
    frames = []
    while True:
        result, error = responses.get(timeout=60)
        assert error is None, error
        tokens = result.as_numpy("tokens")
        if tokens is not None:
            frames.append(tokens[int(result.as_numpy("context_frames")[0]):])
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    client.close()
    return np.concatenate(frames)


def test_seed_controls_tokens(url):
    first, again, other = lm_tokens(url, 5), lm_tokens(url, 5), lm_tokens(url, 6)
    assert first.shape == (20, 16) and first.dtype == np.int32
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


@pytest.mark.parametrize("seconds", [0.08, 0.16])
def test_very_short_request(url, seconds):
    result = synthesize(url, TEXT, seed=1, max_audio_seconds=seconds, ignore_eos=True)
    assert [c.index for c in result.chunks] == [0]
    assert result.audio.size == round(seconds * FRAME_RATE) * 1920
