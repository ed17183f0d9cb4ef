"""Cached voice prompts against a real tritonserver: a voice's second request prefills from the cached prefix (a hit in
/metrics) and its codes are those of a server without the cache, for the same seed. The test brings its own server: on
the session's shared one, another test's request (a hit of the preset voice's own prefix, exported up to a second
late) could land between the two scrapes."""
from __future__ import annotations

import queue

import numpy as np
import tritonclient.grpc as grpcclient

from clients.stream import build_inputs
from tests.e2e.conftest import DEFAULT_PRESET, start_server
from tests.e2e.test_metrics import scrape
from tests.waiting import wait_for

TEXTS = ("The first request of this voice.", "A second request, other words, the same voice.")
VOICE_OPTIONS = dict(language="english", instructions="Speak slowly and calmly.")  # a prefix no other test uses
HITS, MISSES, BYTES = "voxlane_prompt_cache_hits_total", "voxlane_prompt_cache_misses_total", "voxlane_prompt_cache_bytes"


def lm_codes(url: str, text: str, seed: int, seconds: float = 1.2) -> np.ndarray:
    """Stream `speechlm_lm` directly and stack its new frames: [T, K] int32."""
    client = grpcclient.InferenceServerClient(url=url)
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    client.async_stream_infer("speechlm_lm", build_inputs(text, None, seed=seed, max_audio_seconds=seconds,
                                                          ignore_eos=True, **VOICE_OPTIONS),
                              enable_empty_final_response=True)
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


def delta(before: dict, after: dict, name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def test_a_voice_s_second_request_hits_the_cache_and_speaks_the_uncached_server_s_codes(model_cache,
                                                                                      tmp_path_factory):
    server = start_server(DEFAULT_PRESET, tmp_path_factory)
    try:
        before = scrape(server)
        lm_codes(server.grpc_url, TEXTS[0], seed=21)
        cached = lm_codes(server.grpc_url, TEXTS[1], seed=21)
        assert wait_for(lambda: delta(before, scrape(server), HITS) >= 1, timeout_s=10)  # exported once a second
        after = scrape(server)
    finally:
        server.stop(grace_s=0)
    assert (delta(before, after, HITS), delta(before, after, MISSES)) == (1, 1)
    assert after[BYTES] > 0
    uncached_server = start_server(DEFAULT_PRESET, tmp_path_factory, prompt_cache_mib=0)
    try:
        uncached = lm_codes(uncached_server.grpc_url, TEXTS[1], seed=21)
        assert HITS not in scrape(uncached_server)  # no cache, no metrics of one
    finally:
        uncached_server.stop(grace_s=0)
    assert cached.shape == uncached.shape and cached.shape[0] >= 12
    np.testing.assert_array_equal(cached, uncached)
