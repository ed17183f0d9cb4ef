"""Higgs Audio v3 against Boson AI's higgs-audio on tiny random weights (tests/fixtures/higgs_v3_golden.pt, made by
tools/make_higgs_v3_fixture.py from the reference's own code): the delay pattern and its revert, the fused
codebook embedding and audio head, the end-of-stream countdown through the real LMEngine, and the audio
tokenizer's decoder (the reference's weight-normed `dac2.Decoder`, renamed and folded by our checkpoint code) and
its encoder (`_xcodec_encode`, HuBERT's features given)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from backend_python.engine.engine import EngineConfig, LMEngine
from backend_python.engine.sequence import Sequence
from backend_python.models.base import SamplingParams
from backend_python.models.delay_pattern import DelayPattern, FrameAssembler
from backend_python.models.higgs_v3.checkpoint import codec_names, encoder_names, fold_weight_norm
from backend_python.models.higgs_v3.codec import HiggsTokenizerCodec
from backend_python.models.higgs_v3.config import AudioTokenizerConfig, BackboneConfig, HiggsV3Config
from backend_python.models.higgs_v3.lm import HiggsV3LM
from backend_python.models.higgs_v3.presets import TINY_TEXT_VOCAB_SIZE
from backend_python.models.higgs_v3.voice_encoder import HiggsVoiceEncoder
from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig
from tests.golden import assert_float32_close, num_layers
from tests.unit.test_engine import ListSink

FIXTURE = torch.load(Path(__file__).parents[1] / "fixtures" / "higgs_v3_golden.pt")
SHAPE = FIXTURE["shape"]
K, CODEBOOK = SHAPE["num_codebooks"], SHAPE["codebook_size"]
BOS, EOS = CODEBOOK, CODEBOOK + 1


def fixture_config() -> HiggsV3Config:
    backbone = BackboneConfig(vocab_size=TINY_TEXT_VOCAB_SIZE, hidden_size=SHAPE["hidden"], intermediate_size=32,
                              num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    tokenizer = AudioTokenizerConfig(D=SHAPE["D"], ratios=tuple(SHAPE["ratios"]), bins=CODEBOOK, n_q=K,
                                     codebook_dim=SHAPE["codebook_dim"], decoder_dim=SHAPE["decoder_dim"],
                                     semantic_dim=SHAPE["semantic_dim"], encoder_dim=SHAPE["encoder_dim"])
    return HiggsV3Config(backbone, tokenizer, audio_num_codebooks=K, audio_codebook_size=CODEBOOK,
                         audio_stream_bos_id=BOS, audio_stream_eos_id=EOS, voices={"a": "Hello world."})


@pytest.fixture(scope="module")
def lm() -> HiggsV3LM:
    model = HiggsV3LM.from_config(fixture_config(), seed=3)
    missing, unexpected = model.load_state_dict(FIXTURE["state"], strict=False)
    assert not unexpected and not [k for k in missing if not k.startswith("model.")]
    return model


def test_the_delay_pattern_is_the_reference_s():
    pattern = DelayPattern(tuple(range(K)))
    framed = torch.cat((torch.full((1, K), BOS), FIXTURE["delay_codes"].T, torch.full((1, K), EOS)))
    assert torch.equal(pattern.delay(framed, BOS, EOS), FIXTURE["delay_rows"].T)


def test_a_prompt_s_reference_rows_are_the_reference_collator_s(lm):
    assert torch.equal(lm.format.stream_rows(FIXTURE["delay_codes"].T), FIXTURE["delay_rows"].T)


def test_assembled_frames_are_the_reference_s_revert():
    assembler = FrameAssembler(DelayPattern(tuple(range(K))))
    frames = [f for row in FIXTURE["revert_in"].T for f in assembler.push(row, False).frames]
    assert torch.equal(torch.stack(frames), FIXTURE["revert_out"].T)


def test_the_fused_embedding_and_audio_head_are_the_reference_s(lm):
    with torch.no_grad():
        # a sum of the codebooks' rows (one sum), and one linear head
        assert_float32_close(lm.embed_audio(FIXTURE["embed_ids"].T), FIXTURE["embeds"], depth=1)
        assert_float32_close(lm.audio_logits(FIXTURE["hidden"]), FIXTURE["audio_logits"],
                             num_layers(lm.audio_decoder_proj.audio_lm_head))


class ScriptedLogits:
    """The reference's logits, one step's per call: the prefill's call gives step 0's."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits, self.calls = logits, 0

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        step = min(self.calls, self.logits.shape[0] - 1)
        self.calls += 1
        return self.logits[step][None].expand(hidden.shape[0], -1, -1).clone()


def recording(decode, emitted: list[torch.Tensor]):
    """`decode` that also keeps each step's row (one stream)."""
    def run(batch):
        codes, is_eos = decode(batch)
        emitted.append(codes[0].clone())
        return codes, is_eos
    return run


@pytest.mark.parametrize("overlap", [False, True])
def test_the_end_of_stream_countdown_through_the_engine_is_the_reference_s(lm, overlap, monkeypatch):
    """Greedy on the reference's logits: our rows are its rows, our stream closes one step before its last (which
    only samples a code of the end frame), and the frames delivered are its reverted audio without its begin
    and end frames (`serve_engine`'s `revert_delay_pattern(...)[:, 1:-1]`)."""
    rows = FIXTURE["countdown_rows"]  # [S, K], the reference's steps until it ended the audio
    monkeypatch.setattr(lm, "audio_logits", ScriptedLogits(FIXTURE["countdown_logits"]))
    emitted: list[torch.Tensor] = []
    monkeypatch.setattr(lm, "decode", recording(lm.decode, emitted))
    sink = ListSink()
    engine = LMEngine(lm, EngineConfig(
        max_slots=2, max_seq_len=256, codec_left_context_frames=2, overlap_steps=overlap, overlap_min_rows=1,
        num_delay_steps=K - 1,
        scheduler=SchedulerConfig(chunking=ChunkingConfig(first_chunk_frames=2, chunk_frames=5, chunk_growth=None),
                                  admission_policy=AdmissionPolicyName.PREFILL_FIRST)))
    engine.add(Sequence(request_id="r", prompt=lm.encode_prompt("Hello world.", None),
                        sampling=SamplingParams(temperature=0.0), ignore_eos=False, max_frames=100, sink=sink,
                        generator=torch.Generator().manual_seed(0)))
    for _ in range(60):
        engine._collect(0)
        engine.step()
        if sink.done.is_set():
            break
    assert sink.done.is_set() and sink.error is None
    assert torch.equal(torch.stack(emitted[:rows.shape[0] - 1]), rows[:-1])
    reverted = torch.cat((torch.full((1, K), BOS), rows)).T  # the reference's audio_out ids with its begin row
    frames = torch.cat([c.tokens[c.context_frames:] for c in sink.chunks])
    expected = torch.stack([reverted[j, j: reverted.shape[1] - K + 1 + j] for j in range(K)])[:, 1:-1].T
    assert torch.equal(frames, expected)


def test_the_codec_decoder_is_the_reference_s():
    codec = fixture_codec()
    audio = codec.decode_raw(FIXTURE["codec_codes"][None])[0]
    assert audio.shape == FIXTURE["codec_audio"].shape == (SHAPE["frames"] * 960,)
    assert_float32_close(audio, FIXTURE["codec_audio"], num_layers(codec))


def fixture_codec() -> HiggsTokenizerCodec:
    config = fixture_config().tokenizer
    codec = HiggsTokenizerCodec(config)
    codec.load_codec_state(codec_names(fold_weight_norm(FIXTURE["codec_state"]), len(config.ratios)))
    return codec.eval()


def test_the_tokenizer_s_encoder_codes_audio_as_the_reference_s(monkeypatch):
    """The reference encoded the codec fixture's output; HuBERT's averaged hidden states are the fixture's."""
    config = fixture_config().tokenizer
    hubert = dict(hidden_size=SHAPE["semantic_dim"], num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
                  conv_dim=[4] * 7, num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2, mask_time_prob=0.0)
    encoder = HiggsVoiceEncoder(config, hubert, fixture_codec())
    state = encoder_names(fold_weight_norm(FIXTURE["encoder_state"]), len(config.ratios))
    missing, unexpected = encoder.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith(("semantic_model.", "quantizer.")) for k in missing)
    monkeypatch.setattr(encoder, "semantic_features", lambda audio: FIXTURE["encoder_semantic_features"][None])
    with torch.no_grad():
        codes = encoder.eval().codes(FIXTURE["codec_audio"])
    assert torch.equal(codes, FIXTURE["encoder_codes"])


def test_the_backbone_under_the_official_names_is_transformers_qwen3():
    """The checkpoint's `embed_tokens` / `layers.*` / `norm` load into transformers' `Qwen3Model` unchanged, and its
    last hidden state through our audio head gives the logits our prefill stores."""
    from transformers import Qwen3Config, Qwen3Model

    from backend_python.models.higgs_v3.checkpoint import BACKBONE_KEYS, official_lm_names
    from backend_python.models.higgs_v3.presets import tiny

    config = tiny()
    ours = HiggsV3LM.from_config(config, seed=1)
    b = config.backbone
    reference = Qwen3Model(Qwen3Config(vocab_size=b.vocab_size, hidden_size=b.hidden_size,
                                       intermediate_size=b.intermediate_size, num_hidden_layers=b.num_hidden_layers,
                                       num_attention_heads=b.num_attention_heads,
                                       num_key_value_heads=b.num_key_value_heads, head_dim=b.head_dim,
                                       rms_norm_eps=b.rms_norm_eps, rope_parameters={"rope_type": "default",
                                                                                     "rope_theta": b.rope_theta}))
    state = {k: v for k, v in official_lm_names(ours.state_dict()).items() if k.startswith(BACKBONE_KEYS)}
    reference.load_state_dict(state, strict=True)
    prompt = ours.encode_prompt("Hello world.", "en_man")
    ours.allocate_slots(1, 128)
    ours.prefill(0, prompt)
    with torch.no_grad():
        embeds = ours.prompt_embeds(prompt)[None]
        hidden = reference.eval()(inputs_embeds=embeds).last_hidden_state[:, -1]
        expected = ours.audio_logits(hidden)[0]
    assert torch.allclose(ours._require_memory().logits[0], expected, atol=1e-4)
