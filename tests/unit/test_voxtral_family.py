"""Voxtral-TTS as a family: the tiny checkpoint in the official layout and back, Mistral's RoPE layout on the
way in, the registry, the prompt, the frame (end of speech, noise for greedy streams, the bucket-padded twin),
the codec's windows against a full decode, and the published shape."""
from __future__ import annotations

import json

import pytest
import torch

from backend_python.models import registry
from backend_python.models.base import DecodeBatch, SamplingParams, VoiceReference
from backend_python.models.layers.decoder import apply_rope, rope_cos_sin
from backend_python.models.voxtral import checkpoint as ckpt
from backend_python.models.voxtral import description, family, tiny
from backend_python.models.voxtral.codec import LEFT_CONTEXT_FRAMES, VoxtralCodec
from backend_python.models.voxtral.config import PARAMS_FILE, VoxtralConfig
from backend_python.models.voxtral.lm import VoxtralLM
from backend_python.models.voxtral.presets import VOICES, preset_config, voxtral_4b
from tests.unit.lm_graph_helpers import assert_graph_replay_equals_eager, assert_padded_equals_eager, needs_cuda

WINDOW_TOLERANCE = 1e-5  # a window's new samples against a full decode: the decoder is causal


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny.build_tiny_checkpoint(tmp_path_factory.mktemp("voxtral-tiny"), seed=0)


@pytest.fixture(scope="module")
def lm(checkpoint) -> VoxtralLM:
    return VoxtralLM.from_pretrained(checkpoint)


@pytest.fixture(scope="module")
def codec(checkpoint) -> VoxtralCodec:
    return registry.load_codec(registry.resolve(str(checkpoint)), "cpu", "float32")


def test_the_tiny_checkpoint_is_the_official_layout_and_loads_back_the_weights(checkpoint, lm):
    names = set(ckpt.read_tensors(checkpoint))
    assert {"mm_audio_embeddings.tok_embeddings.weight", ckpt.AUDIO_EMBEDDINGS, "layers.0.attention.wq.weight",
            "layers.1.feed_forward.w3.weight", "norm.weight", "acoustic_transformer.llm_projection.weight",
            "audio_tokenizer.decoder_blocks.0.conv.parametrizations.weight.original1",
            "audio_tokenizer.quantizer.semantic_codebook.embedding_sum"} <= names
    assert not any(name.startswith("model.") for name in names)
    built = VoxtralLM.from_config(preset_config("voxtral-tiny"), seed=0)
    assert lm.config == built.config and description.is_checkpoint(checkpoint)
    for (name, a), (_, b) in zip(sorted(built.state_dict().items()), sorted(lm.state_dict().items())):
        assert torch.equal(a, b), name
    assert all(torch.equal(built.voice_embeddings[v], lm.voice_embeddings[v]) for v in lm.voices)
    params = json.loads((checkpoint / PARAMS_FILE).read_text())
    assert params["multimodal"]["audio_model_args"]["acoustic_transformer_args"]["n_decoding_steps"] == 7


def test_the_official_interleaved_rope_is_our_half_split_rope_on_the_permuted_rows():
    """Mistral rotates pairs (2i, 2i + 1) by θ_i; our layers rotate (i, i + d/2): the loader's permutation of wq
    and wk must give the same attention scores."""
    heads, head_dim, width, length = 2, 8, 16, 5
    generator = torch.Generator().manual_seed(0)
    wq, wk = torch.randn(heads * head_dim, width, generator=generator), torch.randn(heads * head_dim, width,
                                                                                       generator=generator)
    x = torch.randn(length, width, generator=generator)
    positions = torch.arange(length)

    def interleaved(w):  # Mistral's apply_rotary_emb: complex pairs
        v = (x @ w.T).view(length, heads, head_dim // 2, 2)
        angles = positions[:, None].float() * 1e6 ** (-torch.arange(0, head_dim, 2).float() / head_dim)
        rotation = torch.polar(torch.ones_like(angles), angles)[:, None]
        return torch.view_as_real(torch.view_as_complex(v.contiguous()) * rotation).flatten(-2)

    theirs = torch.einsum("qhd,khd->hqk", interleaved(wq), interleaved(wk))
    cos, sin = rope_cos_sin(positions[None], head_dim, 1e6, torch.float32)
    q = (x @ ckpt.interleaved_to_halves(wq, heads).T).view(1, length, heads, head_dim)
    k = (x @ ckpt.interleaved_to_halves(wk, heads).T).view(1, length, heads, head_dim)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    ours = torch.einsum("qhd,khd->hqk", q[0], k[0])
    assert torch.allclose(ours, theirs, atol=1e-4)
    assert torch.equal(ckpt.halves_to_interleaved(ckpt.interleaved_to_halves(wq, heads), heads), wq)


def test_the_registry_knows_both_presets_and_their_voices(checkpoint):
    spec = registry.resolve("voxtral-4b")
    assert spec.family == "voxtral" and "voxtral-tiny" in registry.preset_names()
    assert registry.preset_voices(spec) == VOICES and len(VOICES) == 20
    assert registry.resolve(str(checkpoint)).family == "voxtral"
    assert registry.codec_windowing(spec).left_context_frames == LEFT_CONTEXT_FRAMES
    assert registry.load_voice_encoder(spec, "cpu", "float32") is None


def test_the_prompt_is_the_speech_request_s_layout(lm):
    prompt = lm.encode_prompt("Hi é", "casual_male")
    voice_rows = lm.voice_embeddings["casual_male"].shape[0]
    text = [1000 + b for b in "Hi é".encode()]
    assert prompt.tensors["ids"].tolist() == [1, 25] + [24] * voice_rows + [36] + text + [35, 25]
    assert prompt.tensors["voice"].tolist() == [1] and prompt.num_tokens == len(prompt.tensors["ids"])
    embeds = lm.prompt_embeds(prompt)
    assert torch.equal(embeds[2: 2 + voice_rows], lm.voice_embeddings["casual_male"])
    assert lm.encode_prompt("Hi", None).tensors["voice"].tolist() == [0]  # the first preset


def test_bad_prompts_are_refused_by_name(lm):
    with pytest.raises(ValueError, match="unknown voice 'nobody'; known voices: \\['casual_female'"):
        lm.encode_prompt("Hi.", "nobody")
    with pytest.raises(ValueError, match="cannot clone a voice"):
        lm.encode_prompt("Hi.", None, reference=VoiceReference({}))
    with pytest.raises(ValueError, match="text must not be empty"):
        lm.encode_prompt("  ", None)


def prefilled(lm: VoxtralLM) -> None:
    lm.allocate_slots(2, 256)
    lm.prefill(1, lm.encode_prompt("Hello world.", "casual_female"))


def frames(lm: VoxtralLM, params: SamplingParams, seed: int, num_frames: int, ignore_eos: bool = True,
           prefill: bool = True):
    if prefill:
        prefilled(lm)
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num_frames):
        codes, is_eos = lm.decode(DecodeBatch([1], [params], [generator], [ignore_eos]))
        out.append((codes[0], bool(is_eos[0])))
    return out


def test_a_frame_is_one_semantic_code_and_36_fsq_codes_and_greedy_streams_still_draw_their_noise(lm):
    greedy = SamplingParams(temperature=0.0)
    first, again, other = (frames(lm, greedy, seed, 4) for seed in (1, 1, 2))
    codes = torch.stack([c for c, _ in first])
    assert codes.shape == (4, 37) and (codes[:, 0] < 8192).all() and (codes[:, 1:] < 21).all() and (codes >= 0).all()
    assert torch.equal(codes, torch.stack([c for c, _ in again]))  # the seed decides the flow's noise
    other_codes = torch.stack([c for c, _ in other])
    assert torch.equal(codes[0, 0], other_codes[0, 0])  # the first semantic code is greedy: noise never reaches it
    assert not torch.equal(codes[:, 1:], other_codes[:, 1:])  # the flow starts from each stream's own noise


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_end_audio_ends_the_stream_unless_the_end_is_blocked(checkpoint, ignore_eos):
    lm = VoxtralLM.from_pretrained(checkpoint)
    prefilled(lm)
    with torch.no_grad():  # END_AUDIO the only id with a positive logit for the prefilled state, the rest 0
        weight = lm.acoustic_transformer.semantic_codebook_output.weight
        weight.zero_()
        weight[1] = lm._require_memory().hidden[1] * 10
    (codes, is_eos), = frames(lm, SamplingParams(temperature=0.0), 1, 1, ignore_eos=ignore_eos, prefill=False)
    if ignore_eos:  # the end is blocked: the next best code, EMPTY_AUDIO never
        assert not is_eos and codes[0] == 0
    else:
        assert is_eos and codes[0] == -1


@pytest.mark.parametrize("mix", ["greedy", "sampled"])
def test_padded_bucket_frames_equal_unpadded_eager_frames_on_cpu(checkpoint, mix):
    params = {"greedy": SamplingParams(temperature=0.0), "sampled": SamplingParams(temperature=0.9, top_k=50,
                                                                                     top_p=0.9)}[mix]
    assert_padded_equals_eager(VoxtralLM.from_pretrained(checkpoint), [params] * 3, num_frames=4)


def test_the_codec_decodes_1920_samples_a_frame_at_24khz(codec):
    codes = torch.cat((torch.randint(0, 8192, (2, 7, 1)), torch.randint(0, 21, (2, 7, 36))), dim=2)
    audio = codec.decode(codes)
    assert (codec.sample_rate, codec.samples_per_frame, codec.shape.frame_rate, codec.num_codebooks) == (
        24000, 1920, 12.5, 37)
    assert audio.shape == (2, 7 * 1920) and audio.std() > 1e-3


def test_a_window_s_new_samples_match_a_full_decode(codec):
    generator = torch.Generator().manual_seed(3)
    codes = torch.cat((torch.randint(0, 8192, (1, 60, 1), generator=generator),
                       torch.randint(0, 21, (1, 60, 36), generator=generator)), dim=2)
    full = codec.decode(codes)[0]
    start, new = 30, 6
    window = codes[0, start - LEFT_CONTEXT_FRAMES: start + new]
    (samples,) = codec.decode_windows([(window, LEFT_CONTEXT_FRAMES)])
    spf = codec.samples_per_frame
    assert torch.allclose(samples, full[start * spf: (start + new) * spf], atol=WINDOW_TOLERANCE)
    short = codes[0, start - 2: start + new]  # too little context: the first frames differ
    (clipped,) = codec.decode_windows([(short, 2)])
    assert not torch.allclose(clipped, full[start * spf: (start + new) * spf], atol=WINDOW_TOLERANCE)


def test_the_full_shape_is_the_published_params():
    c = voxtral_4b()
    b, f, k = c.backbone, c.flow, c.codec
    assert (b.n_layers, b.dim, b.n_heads, b.n_kv_heads, b.head_dim, b.hidden_dim, b.vocab_size) == (
        26, 3072, 32, 8, 128, 9216, 131072)
    assert (f.n_layers, f.dim, f.n_decoding_steps, f.cfg_alpha) == (3, 3072, 7, 1.2)
    assert (c.num_codebooks, c.audio_embedding_rows, c.semantic_head_size) == (37, 9088, 8320)
    assert (k.decoder_windows(), k.samples_per_frame, k.latent_dim) == ((2, 4, 8, 16), 1920, 292)
    assert VoxtralConfig.from_dict(c.to_dict()) == c
    with torch.device("meta"):
        lm = VoxtralLM(c, tokenizer=None, voice_embeddings={})
    num_parameters = sum(p.numel() for p in lm.parameters())
    assert 3.7e9 < num_parameters < 4.2e9, num_parameters  # "4B": 3.4B backbone and embeddings, 0.4B head


# ---- CUDA ------------------------------------------------------------------------------------
@needs_cuda
@pytest.mark.parametrize("num_rows", [3, 4])
def test_graph_replay_equals_the_eager_step_on_cuda(num_rows):
    """The 4B shape with 2 backbone layers and a 1-layer flow head, bf16: the CUDA-graph replay of the frame (the
    flow's 7 guided steps inside it) is its eager twin, greedy and sampled rows mixed."""
    from dataclasses import replace

    config = voxtral_4b()
    config = replace(config, backbone=replace(config.backbone, n_layers=2), flow=replace(config.flow, n_layers=1))
    lm = VoxtralLM.from_config(config, device="cuda", dtype=torch.bfloat16, seed=0)
    params = [SamplingParams(temperature=0.9, top_k=50, top_p=0.9), SamplingParams(temperature=0.0)] * 2
    assert_graph_replay_equals_eager(lm, params[:num_rows], 10, config.semantic_codebook_size)
