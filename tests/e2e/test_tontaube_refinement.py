"""TontaubeV1 through a real tritonserver: the LM lane writes the semantic codes, the refinement lanes the three
acoustic codebooks chunk by chunk (each chunk's refiner reads the stream's semantic codes so far and continues the
codes it wrote for the earlier frames), the codec lanes decode whole frames. The streamed audio is what the same
refinement, run here in the chunks' order, decodes to in one pass (up to the codec windows' tolerance); both
refinement lanes served chunks."""
from __future__ import annotations

import re
import urllib.request

import numpy as np
import pytest
import torch

from backend_python.models import registry
from backend_python.models.tontaube.refiner import RefineRequest
from clients.stream import synthesize
from tests.e2e.test_streaming import TEXT, chunk_frames, lm_tokens

PRESET = "tontaube-tiny"
TOLERANCE = 2e-3  # DualCodec's windows with 5 frames of lookahead, measured under 1e-3 off a full decode


def served(metrics_url: str, model: str) -> float | None:
    """Triton's count of `model`'s successful requests (the router's BLS calls), None: no such model."""
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    match = re.search(rf'^nv_inference_request_success{{model="{model}",version="1"}} ([0-9.e+]+)$', text, re.M)
    return float(match.group(1)) if match else None


def refined_in_chunks(semantic: np.ndarray, chunk_sizes: list[int], lookahead: int) -> tuple[np.ndarray, int]:
    """The refinement lanes' codes for a stream cut into `chunk_sizes`, as the router asks for them, and how many
    calls that takes (a chunk whose window ends within the frames refined so far needs none)."""
    spec = registry.resolve(PRESET)
    refiner = registry.load_refiner(spec, "cpu", "float32")
    context = registry.load_lm(spec, "cpu", "float32").encode_prompt(TEXT, None).tensors["refine_context"].numpy()
    refined, calls = np.zeros((0, 3), np.int32), 0
    end = 0
    for size in chunk_sizes:
        end += size
        window_end = min(end + lookahead, semantic.shape[0])
        if window_end > refined.shape[0]:
            codes = refiner.refine([RefineRequest(semantic[:window_end].tolist(), refined.tolist(), context)])[0]
            refined, calls = np.concatenate((refined, codes)), calls + 1
    return refined, calls


def test_streamed_audio_is_the_chunkwise_refinement_decoded(family):
    if family.preset != PRESET:
        pytest.skip(f"TontaubeV1 only ({family.preset})")
    seed, seconds = 21, 4.8
    before = {model: served(family.metrics_url, model) for model in ("refiner", "refiner_urgent")}
    semantic = lm_tokens(family.url, seed, seconds)[:, 0]  # [60]
    streamed = synthesize(family.url, TEXT, seed=seed, max_audio_seconds=seconds, ignore_eos=True)
    sizes = chunk_frames(semantic.shape[0], PRESET)
    assert [c.audio.size // family.samples_per_frame for c in streamed.chunks] == sizes
    spec = registry.resolve(PRESET)
    codec = registry.load_codec(spec, "cpu", "float32")
    refined, calls = refined_in_chunks(semantic, sizes, codec.lookahead_frames)
    frames = np.concatenate((semantic[:, None], refined), axis=1)
    with torch.inference_mode():
        full = codec.decode(torch.from_numpy(frames.astype(np.int64))[None])[0].numpy()
    assert streamed.audio.shape == full.shape and np.abs(full).max() > 0.05
    np.testing.assert_allclose(streamed.audio, full, rtol=0, atol=TOLERANCE)
    lanes = [c.lane for c in streamed.chunks]
    assert set(lanes) == {"urgent", "background"}
    after = {model: served(family.metrics_url, model) for model in ("refiner", "refiner_urgent")}
    assert after["refiner_urgent"] > before["refiner_urgent"] and after["refiner"] > before["refiner"]
    assert sum(after.values()) - sum(before.values()) == calls  # the lanes refined each frame once


def test_a_family_that_is_not_a_cascade_loads_no_refinement_lane(family):
    if family.preset == PRESET:
        pytest.skip("a plain family's server")
    assert served(family.metrics_url, "refiner") is None and served(family.metrics_url, "refiner_urgent") is None


def test_timeshare_refines_inline_and_speaks_the_same_audio(family, tmp_path_factory):
    """The baseline: one process refines and decodes inline (no refinement lanes), the same frames' audio."""
    if family.preset != PRESET:
        pytest.skip(f"TontaubeV1 only ({family.preset})")
    from tests.e2e.conftest import start_server
    seed, seconds = 21, 2.0
    lanes = synthesize(family.url, TEXT, seed=seed, max_audio_seconds=seconds, ignore_eos=True)
    server = start_server(PRESET, tmp_path_factory, mode="timeshare")
    try:
        inline = synthesize(server.grpc_url, TEXT, seed=seed, max_audio_seconds=seconds, ignore_eos=True)
        assert served(f"http://127.0.0.1:{server.config.ports.metrics}/metrics", "refiner") is None
    finally:
        server.stop(grace_s=0)
    assert {c.lane for c in inline.chunks} == {"inline"}
    np.testing.assert_allclose(inline.audio, lanes.audio, rtol=0, atol=TOLERANCE)


def test_a_cloned_voice_is_its_reference_s_codes_and_changes_the_audio(family):
    """Reference audio (up to 60 s) is coded on the voice encoder lane (w2v-BERT features and DualCodec's encoder)
    and becomes the voice prompt: another reference, other audio; the same one, the same audio."""
    if family.preset != PRESET:
        pytest.skip(f"TontaubeV1 only ({family.preset})")
    rng = np.random.default_rng(4)
    one, two = ((rng.uniform(-1, 1, 48000) * 0.3).astype(np.float32) for _ in range(2))
    settings = dict(seed=5, max_audio_seconds=1.2, ignore_eos=True, ref_sample_rate=24000, x_vector_only=True)
    first = synthesize(family.url, TEXT, ref_audio=one, **settings)
    again = synthesize(family.url, TEXT, ref_audio=one, **settings)
    other = synthesize(family.url, TEXT, ref_audio=two, **settings)
    preset = synthesize(family.url, TEXT, seed=5, max_audio_seconds=1.2, ignore_eos=True)
    np.testing.assert_array_equal(first.audio, again.audio)
    assert not np.array_equal(first.audio, other.audio) and not np.array_equal(first.audio, preset.audio)
