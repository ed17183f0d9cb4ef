"""Higgs Audio v3 as a family: the tiny checkpoint round trip, the registry and chunk plan, the codec's length,
rate and windows against a full decode, the voice-clone prompt, the bucket-padded frame, and the full shape."""
from __future__ import annotations

import pytest
import torch

from backend_python.models import registry
from backend_python.models.base import SamplingParams, VoiceReference
from backend_python.models.families import describe
from backend_python.models.higgs_v3 import description, tiny
from backend_python.models.higgs_v3.checkpoint import read_config
from backend_python.models.higgs_v3.codec import LEFT_CONTEXT_FRAMES, LOOKAHEAD_FRAMES, HiggsTokenizerCodec
from backend_python.models.higgs_v3.lm import HiggsV3LM
from backend_python.models.higgs_v3.presets import higgs_v3_4b, preset_config
from backend_python.models.higgs_v3.prompt import AUDIO, REF_CODES
from tests.unit.lm_graph_helpers import assert_graph_replay_equals_eager, assert_padded_equals_eager, needs_cuda

torch.set_flush_denormal(True)
WINDOW_TOLERANCE = 1e-4  # a window's new samples against a full decode (12 frames of context, 10 of lookahead)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny.build_tiny_checkpoint(tmp_path_factory.mktemp("higgs-v3-tiny"), seed=0)


@pytest.fixture(scope="module")
def codec(checkpoint) -> HiggsTokenizerCodec:
    return HiggsTokenizerCodec.from_pretrained(checkpoint, read_config(checkpoint).tokenizer)


def test_the_tiny_checkpoint_loads_back_the_weights_it_was_built_from(checkpoint, codec):
    config = preset_config("higgs-v3-tiny")
    built = HiggsV3LM.from_config(config, seed=0)
    loaded = HiggsV3LM.from_pretrained(checkpoint)
    assert loaded.config == config and description.is_checkpoint(checkpoint)
    for (name, a), (_, b) in zip(sorted(built.state_dict().items()), sorted(loaded.state_dict().items())):
        assert torch.equal(a, b), name
    assert all(torch.equal(built.voice_codes[v], loaded.voice_codes[v]) for v in config.voices)
    random = HiggsTokenizerCodec.from_config(config.tokenizer, seed=0)
    for (name, a), (_, b) in zip(sorted(random.state_dict().items()), sorted(codec.state_dict().items())):
        assert torch.equal(a, b), name


def test_the_registry_and_the_chunk_plan_know_the_family():
    spec = registry.resolve("higgs-v3-4b")
    assert spec.family == "higgs_v3" and "higgs-v3-tiny" in registry.preset_names()
    assert registry.preset_voices(spec) == ("en_woman", "en_man")
    assert registry.codec_windowing(spec).lookahead_frames == LOOKAHEAD_FRAMES
    assert describe("higgs-v3-tiny") is description.DESCRIPTION
    plan = describe("higgs-v3-4b").chunk_plan
    assert (plan.first_chunk_frames, plan.chunk_frames, plan.chunk_growth) == (2, 45, 2.0)  # the measured sweep's


def test_the_codec_decodes_960_samples_a_frame_at_24khz(codec):
    codes = torch.randint(0, codec.codebook_size, (2, 7, 8), generator=torch.Generator().manual_seed(1))
    audio = codec.decode(codes)
    assert (codec.sample_rate, codec.samples_per_frame, codec.shape.frame_rate) == (24000, 960, 25.0)
    assert audio.shape == (2, 7 * 960) and audio.abs().max() <= 1.0 and audio.std() > 1e-3


def test_a_window_s_new_samples_match_a_full_decode(codec):
    codes = torch.randint(0, codec.codebook_size, (1, 70, 8), generator=torch.Generator().manual_seed(2))
    full = codec.decode(codes)[0]
    start, end = 30, 40  # a chunk of 10 new frames
    window = codes[0, start - LEFT_CONTEXT_FRAMES: end + LOOKAHEAD_FRAMES]
    (new,) = codec.decode_windows([(window, LEFT_CONTEXT_FRAMES)])
    new = new[: (end - start) * 960]
    assert (new - full[start * 960: end * 960]).abs().max() < WINDOW_TOLERANCE
    short = codes[0, start - LEFT_CONTEXT_FRAMES: end + 2]  # too little lookahead is far off: the bound is real
    (off,) = codec.decode_windows([(short, LEFT_CONTEXT_FRAMES)])
    assert (off[: (end - start) * 960] - full[start * 960: end * 960]).abs().max() > 100 * WINDOW_TOLERANCE


def test_windows_of_different_lengths_decode_as_each_alone(codec):
    generator = torch.Generator().manual_seed(3)
    windows = [(torch.randint(0, 1024, (n, 8), generator=generator), c) for n, c in ((9, 2), (14, 4))]
    batched = codec.decode_windows(windows)
    for (codes, context), audio in zip(windows, batched):
        assert torch.equal(audio, codec.decode(codes[None])[0, context * 960:])


def test_a_voice_clone_prompt_holds_the_transcript_and_the_delayed_reference(checkpoint):
    lm = HiggsV3LM.from_pretrained(checkpoint)
    codes = torch.randint(0, 1024, (6, 8), generator=torch.Generator().manual_seed(4))
    prompt = lm.encode_prompt("Hello world.", None, VoiceReference({REF_CODES: codes}, text="The quick brown fox."))
    plain = lm.encode_prompt("Hello world.", None)
    ids, rows = prompt.tensors["ids"], prompt.tensors["rows"]
    assert (ids == AUDIO).sum() == rows.shape[0] == 6 + 2 + 7 + 1  # framed, delayed reference + the begin row
    assert torch.equal(rows[:-1], lm.format.stream_rows(codes)) and (rows[-1] == 1024).all()
    text = lm.tokenizer.decode(ids[ids != AUDIO])
    assert "The quick brown fox." in text and text.endswith("Hello world.<|im_end|>\n<|im_start|>assistant\n"
                                                             "<|audio_out_bos|>")
    assert prompt.num_tokens > plain.num_tokens
    preset = lm.encode_prompt("Hello world.", "en_man")
    assert torch.equal(preset.tensors["rows"][:-1], lm.format.stream_rows(lm.voice_codes["en_man"]))
    with pytest.raises(ValueError, match="transcript"):
        lm.encode_prompt("Hi.", None, VoiceReference({REF_CODES: codes}, text=None))
    with pytest.raises(ValueError, match="unknown voice 'nobody'"):
        lm.encode_prompt("Hi.", "nobody")


def test_ignore_eos_rows_never_end_and_a_random_model_s_rows_follow_the_delays(checkpoint):
    lm = HiggsV3LM.from_pretrained(checkpoint)
    lm.allocate_slots(2, 128)
    lm.prefill(1, lm.encode_prompt("Hello world.", "en_woman"))
    from backend_python.models.base import DecodeBatch
    for step in range(12):
        codes, is_eos = lm.decode(DecodeBatch([1], [SamplingParams()], [torch.Generator().manual_seed(step)],
                                              [True]))
        assert not is_eos.any()
        assert (codes[0, step + 1:] == 1024).all() and (codes[0, : step + 1] < 1024).all()


@pytest.mark.parametrize("mix", ["greedy", "sampled"])
def test_padded_bucket_frames_equal_unpadded_eager_frames_on_cpu(checkpoint, mix):
    params = {"greedy": SamplingParams(temperature=0.0), "sampled": SamplingParams(temperature=0.9, top_k=50,
                                                                                     top_p=0.9)}[mix]
    assert_padded_equals_eager(HiggsV3LM.from_pretrained(checkpoint), [params] * 3, num_frames=4)


def test_the_full_shape_is_qwen3_4b_and_the_higgs_tokenizer():
    c = higgs_v3_4b()
    b = c.backbone
    assert (b.num_hidden_layers, b.hidden_size, b.num_attention_heads, b.num_key_value_heads) == (36, 2560, 32, 8)
    assert (c.audio_num_codebooks, c.audio_vocab_size, c.codebook_delays) == (8, 1026, tuple(range(8)))
    with torch.device("meta"):
        lm = HiggsV3LM(c, tokenizer=None, voice_codes={})
    num_parameters = sum(p.numel() for p in lm.parameters())
    assert 3.8e9 < num_parameters < 4.1e9, num_parameters  # Qwen3-4B without its text head, plus the audio tables


def test_the_voice_encoder_loads_back_and_codes_25_frames_a_second(checkpoint, codec):
    from backend_python.models.higgs_v3.voice_encoder import HiggsVoiceEncoder, hubert_config

    cfg = read_config(checkpoint).tokenizer
    loaded = HiggsVoiceEncoder.from_pretrained(checkpoint, cfg, hubert_config(cfg), codec)
    built = HiggsVoiceEncoder.from_config(cfg, hubert_config(cfg), HiggsTokenizerCodec.from_config(cfg, seed=0), seed=0)
    for (name, a), (_, b) in zip(sorted(built.state_dict().items()), sorted(loaded.state_dict().items())):
        assert torch.equal(a, b), name
    noise = torch.randn(2 * 24000 + 500, generator=torch.Generator().manual_seed(5)) * 0.3
    (result,) = loaded.encode([noise], [False])
    codes = result[REF_CODES]
    assert codes.shape == (51, 8) and codes.dtype == torch.int64  # ceil(48500 / 960) frames: the last partial
    assert 0 <= codes.min() and codes.max() < 1024
    assert len({tuple(row.tolist()) for row in codes}) > 1  # the frames hear their own audio
    assert torch.equal(loaded.encode([noise], [False])[0][REF_CODES], codes)
    with pytest.raises(ValueError, match="x_vector_only"):
        loaded.encode([noise], [True])
    assert registry.load_voice_encoder(registry.resolve("higgs-v3-tiny"), "cpu", "float32").sample_rate == 24000


# ---- CUDA ------------------------------------------------------------------------------------
@needs_cuda
@pytest.mark.parametrize("num_rows", [3, 4])
def test_graph_replay_equals_the_eager_step_on_cuda(num_rows):
    """The 4B shape (GQA 32/8 × 128, 8 × 1026 head) with 2 layers, bf16: CUDA-graph replay is its eager twin;
    rows hold begin/end-of-stream ids as padding, so the bound is the audio vocabulary."""
    from dataclasses import replace

    config = higgs_v3_4b()
    config = replace(config, backbone=replace(config.backbone, num_hidden_layers=2))
    lm = HiggsV3LM.from_config(config, device="cuda", dtype=torch.bfloat16, seed=0)
    params = [SamplingParams(temperature=0.9, top_k=50, top_p=0.9), SamplingParams(temperature=0.0)] * 2
    assert_graph_replay_equals_eager(lm, params[:num_rows], 10, config.audio_vocab_size)


def test_a_segment_hears_the_segment_before_after_the_cloned_voice(checkpoint):
    from backend_python.models.text_segments import SegmentContext

    lm = HiggsV3LM.from_pretrained(checkpoint)
    frames = torch.randint(0, 1024, (9, 8), generator=torch.Generator().manual_seed(6))
    prompt = lm.encode_segment("Then wait for it.", "en_man", SegmentContext("Get the trust fund.", frames))
    rows, voice = prompt.tensors["rows"], lm.voice_codes["en_man"]
    voice_rows = lm.format.stream_rows(voice)
    assert torch.equal(rows[: voice_rows.shape[0]], voice_rows)
    assert torch.equal(rows[voice_rows.shape[0]: -1], lm.format.stream_rows(frames))
    text = lm.tokenizer.decode(prompt.tensors["ids"][prompt.tensors["ids"] != AUDIO])
    assert text.index(lm.config.voices["en_man"]) < text.index("Get the trust fund.") < text.index("Then wait")
    too_long = SegmentContext("Long.", torch.zeros(501, 8, dtype=torch.int64))  # past 20 s at 25 frames/s
    assert torch.equal(lm.encode_segment("Hi.", None, too_long).tensors["rows"],
                       lm.encode_prompt("Hi.", None).tensors["rows"])
