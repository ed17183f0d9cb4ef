"""The Zonos family as the registry and the engine see it: presets, the tiny checkpoint's round trip, voices,
the chunk plan; classifier-free guidance's two KV rows per stream in the slot accounting; batched, padded (the
CUDA graph path's eager twin), pooled and single decodes agreeing; the graph replay on CUDA."""
from __future__ import annotations

import pytest
import torch

from backend_python.engine import kv_memory
from backend_python.engine.config import EngineConfig
from backend_python.models import registry
from backend_python.models.base import DecodeBatch, SamplingParams, VoiceReference
from backend_python.models.families import describe
from backend_python.models.zonos import description, family
from backend_python.models.zonos.config import ZonosConfig, official_conditioners
from backend_python.models.zonos.lm import ZonosLM
from backend_python.models.zonos.presets import preset_config, random_voices
from backend_python.models.zonos.tiny import build_tiny_checkpoint
from tests.unit.lm_graph_helpers import (TEXTS, assert_graph_replay_equals_eager, assert_padded_equals_eager,
                                        decode_frames, needs_cuda, sampling_mixes)

GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.5)
SAMPLED = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, repetition_penalty=1.2)
MIXES = sampling_mixes(GREEDY, SAMPLED)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("zonos") / "zonos-tiny")


@pytest.fixture(scope="module")
def tiny_lm() -> ZonosLM:
    return ZonosLM.from_config(preset_config("zonos-tiny").lm, random_voices(0), seed=0)


def test_the_registry_lists_both_presets_and_finds_the_family_of_a_checkpoint(checkpoint):
    assert {"zonos-tiny", "zonos-1.6b"} <= set(registry.preset_names())
    assert description.is_checkpoint(checkpoint)
    assert describe(str(checkpoint)) is description.DESCRIPTION  # the official config.json names no model_type
    plan = describe("zonos-tiny").chunk_plan
    assert (plan.first_chunk_frames, plan.chunk_frames, plan.chunk_growth) == (6, 43, 1.5)  # the measured sweep's


def test_the_tiny_checkpoint_loads_back_to_the_same_weights_and_voices(checkpoint, tiny_lm):
    loaded = ZonosLM.from_pretrained(checkpoint)
    assert loaded.voices == ("default", "amber", "basil") == family.preset_voices(
        registry.ModelSpec("zonos-tiny", "zonos", checkpoint=checkpoint))
    state, expected = loaded.state_dict(), tiny_lm.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], expected[k]) for k in state)
    assert ZonosConfig.from_json_file(checkpoint / "config.json") == preset_config("zonos-tiny").lm


def test_the_full_preset_is_the_official_shape():
    config = preset_config("zonos-1.6b").lm
    shape = config.backbone
    assert (shape.d_model, shape.n_layer, shape.num_heads, shape.num_heads_kv, shape.head_dim,
            shape.attn_mlp_d_intermediate) == (2048, 26, 16, 4, 128, 8192)
    assert config.conditioners == official_conditioners() and config.codebook_delays == tuple(range(9))
    assert ZonosConfig.from_dict(config.to_dict()) == config
    with torch.device("meta"):
        lm = ZonosLM(config, {})
    assert 1.5e9 < sum(p.numel() for p in lm.parameters()) < 1.7e9


def test_a_hybrid_checkpoint_is_refused_by_name():
    d = preset_config("zonos-tiny").lm.to_dict()
    d["backbone"]["ssm_cfg"] = {"layer": "Mamba2"}
    with pytest.raises(ValueError, match="only the Zonos transformer variant"):
        ZonosConfig.from_dict(d)


def test_an_unknown_voice_names_the_known_ones(tiny_lm):
    with pytest.raises(ValueError, match="'default', 'amber', 'basil'"):
        tiny_lm.encode_prompt("Hi.", "nobody")



def test_a_reference_is_its_speaker_embedding(tiny_lm):
    speaker = torch.randn(128)
    prompt = tiny_lm.encode_prompt("Hi.", "amber", reference=VoiceReference({"speaker_embedding": speaker}))
    assert torch.equal(prompt.tensors["speaker"], speaker)  # it takes the voice's place
    with pytest.raises(ValueError, match="'speaker_embedding': float \\[128\\]"):
        tiny_lm.encode_prompt("Hi.", None, reference=VoiceReference({"ref_codes": torch.zeros(3, 9)}))
    feed = tiny_lm.open_text(None, reference=VoiceReference({"speaker_embedding": speaker}))
    feed.append("Hello there.")
    feed.close()
    assert torch.equal(feed.prompt().tensors["speaker"], speaker)
    without = ZonosLM.from_config(preset_config("zonos-tiny").lm, {}, seed=0)
    without.supports_reference = False  # a checkpoint without a speaker model
    with pytest.raises(ValueError, match="cannot clone"):
        without.encode_prompt("Hi.", None, reference=VoiceReference({"speaker_embedding": speaker}))


def test_a_stream_costs_two_kv_rows(tiny_lm):
    """Guidance runs a conditional and an unconditional row per stream: one KV position of a stream holds both,
    so the pool the engine sizes from a memory budget holds half the positions of an unguided model's."""
    shape = tiny_lm.config.backbone
    plain = 2 * shape.n_layer * shape.num_heads_kv * shape.head_dim * 4  # K and V, float32
    assert tiny_lm.kv_bytes_per_position() == 2 * plain
    config = EngineConfig(max_slots=64, max_seq_len=256, kv_cache_gb=plain * 1000 / 2**30, kv_block_size=1)
    assert kv_memory.pool_positions(tiny_lm, config) == 500
    tiny_lm.allocate_slots(4, 64, kv_positions=500)
    kv = tiny_lm._require_memory().kv
    assert kv.num_positions == 2 * 500 + 64  # both halves of the pool, and the scratch row
    tiny_lm.place(2, 100, 40)
    offset = tiny_lm._require_memory().uncond_offset
    assert (int(kv.row_starts[2]), int(kv.row_starts[2 + offset])) == (100, 600)


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_padded_bucket_steps_equal_unpadded_eager_steps(tiny_lm, mix):
    assert_padded_equals_eager(tiny_lm, MIXES[mix][:3], num_frames=12)


def test_pooled_extents_decode_as_static_rows(tiny_lm):
    """As lm_graph_helpers.assert_pooled_equals_static, for a pool of two halves (conditional, unconditional)."""
    params, slots = MIXES["mixed"][:3], [5, 0, 2]
    static = decode_frames(tiny_lm, slots, params, num_frames=12)
    pooled = decode_frames(tiny_lm, slots, params, num_frames=12, pooled=True)
    kv = tiny_lm._require_memory().kv
    assert kv.num_positions < 2 * 3 * kv.max_seq_len  # really pooled: the extents, twice, and the scratch row
    assert torch.equal(pooled, static)


def test_each_stream_of_a_batch_decodes_as_it_would_alone(tiny_lm):
    """The guided batch is 2B backbone rows: no stream's conditional or unconditional half reads another's."""
    params = MIXES["mixed"][:3]
    batched = decode_frames(tiny_lm, [5, 0, 2], params, num_frames=12)
    for row, slot in enumerate([5, 0, 2]):
        assert torch.equal(decode_alone(tiny_lm, slot, row, params[row]), batched[row])


def decode_alone(lm: ZonosLM, slot: int, row: int, params: SamplingParams) -> torch.Tensor:
    """Row `row` of `decode_frames` (its text and its generator's seed) in `slot`, alone: [steps, 9]."""
    lm.allocate_slots(8, 128)
    lm.prefill(slot, lm.encode_prompt(TEXTS[row], None))
    batch = DecodeBatch([slot], [params], [torch.Generator().manual_seed(100 + row)], [True])
    return torch.stack([lm.decode(batch)[0][0] for _ in range(12)])


def test_the_first_rows_fill_codebooks_one_step_at_a_time(tiny_lm):
    rows = decode_frames(tiny_lm, [1], [SAMPLED], num_frames=10)[0]  # [steps, 9]
    for step in range(9):
        assert (rows[step, step + 1:] == 1025).all() and (rows[step, :step + 1] < 1024).all()
    assert (rows[9] < 1024).all()


@needs_cuda
@pytest.mark.parametrize("mix", sorted(MIXES))
def test_graph_replay_equals_the_eager_step(mix):
    cuda_lm = ZonosLM.from_config(preset_config("zonos-tiny").lm, random_voices(0), device="cuda",
                                  dtype=torch.bfloat16, seed=0)
    assert_graph_replay_equals_eager(cuda_lm, MIXES[mix][:3], 12, 1026)


def test_the_lm_lane_gets_a_max_seq_len_for_86_frames_a_second():
    from server.serve import ServeConfig
    from protocol import models

    assert ServeConfig(model="zonos-tiny").parameters(models.LM)["max_seq_len"] == "8192"
    assert "max_seq_len" not in ServeConfig(model="zonos-tiny").parameters(models.CODEC)
    assert "max_seq_len" not in ServeConfig(model="csm-tiny").parameters(models.LM)  # the repository's 2048


def test_the_fused_heads_of_the_cuda_path_give_the_same_logits(tiny_lm):
    hidden = torch.randn(3, tiny_lm.config.backbone.d_model)
    separate = tiny_lm.apply_heads(hidden)
    tiny_lm._fuse_projections()
    try:
        torch.testing.assert_close(tiny_lm.apply_heads(hidden), separate, rtol=1e-6, atol=1e-5)
    finally:
        tiny_lm._head_weight = None
