"""FlashTTS's codec (mean-flow DiT + HiFi-GAN) and family: chunked windows against a full decode, the block grid's
exact mel, 1 and 2 evaluations, determinism, the condition, save/load, FlashTTS's checkpoint names, the full
shapes on the meta device, and the family through the registry.

Chunked vs full, measured on the tiny codec (random weights, 66 tokens, FlashTTS's plan: 18 new tokens per chunk
with 6 of lookahead, so the first window is 24 tokens; 18 tokens of left context; no overlap; windows placed by
their start frames; output std 0.171):
- 1 evaluation: max 1.63e-2, rms 4.6e-4. Tokens 0-14 of each chunk within 8.4e-5, most within 1e-6 (the new
  tokens' mel is exact; a chunk's first token is 8e-5 off where the vocoder reads the context's last block, whose
  mel would need a 4th block of context: 24 tokens of context make it 1.2e-6, for 14% more frames per window;
  12 tokens leave 2e-3); the error sits in each chunk's last 3 tokens (5e-5, 2e-3, 1.6e-2), where the vocoder
  reads the lookahead block's mel, which misses its own next block.
- 2 evaluations: max 1.21e-2, rms 4.3e-4; the whole last block of a chunk is off (6e-4 before its last 2
  tokens): two evaluations reach two blocks ahead and the lookahead holds one. Tokens 0-9: within 1.0e-4.
- no left context: max 0.54, at each chunk's first tokens.
- 1 token of overlap cross-faded in (the router's OverlapJoin): the same max, rms 6.3e-4: it moves the error of a
  chunk's end into the next chunk's start instead of removing it.
Full shape (16 x 768, 512-channel HiFi-GAN; 60 tokens, not run here: minutes on 2 CPU cores): 1 evaluation,
18 tokens of context: max 4.35e-2, rms 1.74e-3 against output std 0.21, worst at the chunks' last tokens (12 and
24 tokens of context: the same max, rms 1.76e-3 and 1.74e-3); overlap 1 and 2: rms 2.3e-3 and 3.0e-3. 2
evaluations, 18 tokens of context: max 3.7e-2, rms 1.64e-3 against std 0.23 (36 tokens: the same).
"""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch.nn.utils.parametrizations import weight_norm

from backend_python.engine.codec_runner import StreamChunk, decode_windowed
from backend_python.models import registry
from backend_python.models.base import CodecWindowing, DecodeBatch, SamplingParams
from backend_python.models.flashtts import FlashTTSCodec, FlashTTSCodecConfig
from backend_python.models.flashtts.codec import flashtts_state, serving_state
from backend_python.models.flashtts.config import FlashTTSConfig
from backend_python.models.flashtts.lm import FlashTTSLM
from backend_python.models.flashtts.presets import flashtts_0_5b, tiny
from backend_python.models.flashtts.vocoder import HiFiGAN, HiFiGANConfig, fold_weight_norm
from backend_python.vox_ensemble.overlap_join import OverlapJoin
from scheduler import ChunkingConfig, SchedulerConfig
from scheduler.config import AdmissionPolicyName
from tests.unit.test_engine import make_engine, make_seq, run_until_done

torch.set_flush_denormal(True)

NUM_TOKENS, HOP, LOOKAHEAD = 66, 18, 6  # FlashTTS's streaming: a 24-token window, then an 18-token hop
SPF = 960
END_ATOL, END_RMS = 2.5e-2, 1e-3  # measured 1.63e-2 / 4.6e-4 (1 evaluation), 1.21e-2 / 4.3e-4 (2)
INNER_ATOL = {1: 2e-4, 2: 4e-4}  # before a chunk's last 3 tokens (1 evaluation, measured 8.4e-5) or before its
INNER_TOKENS = {1: 15, 2: 10}  # last block (2 evaluations, measured 1.0e-4)
EXACT_ATOL = 1e-5  # fp32 CPU rounding: measured 1e-6
FLASHTTS_DIT_PARAMETERS = 159_252_624  # the published yaml's comment ("159.252624 M  768 16")
ECAPA_PARAMETERS = 5_997_376  # its InputEmbedding's ECAPA-TDNN (the voice encoder's part: not ours)
CONV_POS_PARAMETERS = 2_287_104  # its InputEmbedding's conv position embedding (built, never called)


@pytest.fixture(scope="module")
def codecs() -> dict[int, FlashTTSCodec]:
    """The tiny codec with 1 and 2 evaluations: the same weights."""
    one = FlashTTSCodec.from_config(FlashTTSCodecConfig.tiny(), seed=0)
    two = FlashTTSCodec(replace(one.cfg, n_evals=2))
    two.load_state_dict(one.state_dict())
    return {1: one, 2: two.prepare("cpu", torch.float32)}


@pytest.fixture(scope="module")
def utterance() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return torch.randint(0, 6561, (NUM_TOKENS, 1), generator=generator), torch.randn(320, generator=generator)


def chunked(codec: FlashTTSCodec, codes: torch.Tensor, condition: torch.Tensor, context: int) -> torch.Tensor:
    """The stream as the engine cuts it (HOP new tokens, LOOKAHEAD after, `context` before) and the router joins it
    (the codec's overlap cross-faded into the next chunk) -> audio [T * 960]."""
    join, pieces = OverlapJoin(), []
    for start in range(0, codes.shape[0], HOP):
        end = min(start + HOP, codes.shape[0])
        own, ahead = min(context, start), min(end + LOOKAHEAD, codes.shape[0])
        [audio] = codec.decode_windows([(codes[start - own:ahead], own)], [condition], start_frames=[start])
        tail = min(codec.overlap_frames, ahead - end) * SPF
        pieces.append(join.join(audio[:(end - start) * SPF + tail].numpy(), tail))
    return torch.from_numpy(np.concatenate(pieces))


@pytest.mark.parametrize("n_evals", [1, 2])
def test_chunked_windows_match_a_full_decode(codecs, utterance, n_evals):
    codec, (codes, condition) = codecs[n_evals], utterance
    full = codec.decode(codes[None], condition[None])[0]
    error = (chunked(codec, codes, condition, codec.left_context_frames) - full).abs()
    per_token = error.view(NUM_TOKENS, SPF).amax(dim=1)
    inner = torch.tensor([i % HOP < INNER_TOKENS[n_evals] for i in range(NUM_TOKENS)])
    assert full.std() > 0.1 and error.max() < END_ATOL and error.pow(2).mean().sqrt() < END_RMS
    assert per_token[inner].max() < INNER_ATOL[n_evals]


def test_without_left_context_a_chunk_starts_elsewhere(codecs, utterance):
    codes, condition = utterance
    full = codecs[1].decode(codes[None], condition[None])[0]
    assert (chunked(codecs[1], codes, condition, context=0) - full).abs().max() > 0.1  # measured 0.54


def test_one_evaluation_gives_the_full_decodes_mel_for_every_new_token(codecs, utterance):
    """Block attention: n evaluations reach 3n blocks back and n ahead. With that context, on the chunk's grid, a
    window's new mel is exact where its lookahead (1 block) covers the reach: every new token with 1 evaluation,
    all but the last block with 2."""
    codes, condition = utterance[0][None, :, 0], codecs[1].stack_conditions([utterance[1]])
    start = 36
    for n_evals, exact_tokens in ((1, HOP), (2, HOP - 6)):
        context = 18 * n_evals
        window = codes[:, start - context:start + HOP + LOOKAHEAD]
        with torch.inference_mode():
            full = codecs[n_evals].token_to_mel(codes, torch.tensor([0]), condition)[0]
            mel = codecs[n_evals].token_to_mel(window, torch.tensor([start - context]), condition)[0]
        new = mel[context * 4:(context + HOP) * 4]
        error = (new - full[start * 4:(start + HOP) * 4]).abs().view(HOP, 4, -1).amax(dim=(1, 2))
        assert error[:exact_tokens].max() < EXACT_ATOL
        assert n_evals == 1 or error[exact_tokens:].max() > 1e-4


def test_windows_are_laid_out_by_stream_position(codecs, utterance):
    """A context that is not whole blocks (20 tokens) still gives the full decode's mel for the new tokens: the
    block grid and the noise are the stream's. Without its start frame a window is taken to start the stream: its
    grid is the same here (it starts on a block boundary), its noise is the stream's start's."""
    codec, codes = codecs[1], utterance[0][None, :, 0]
    condition = codec.stack_conditions([utterance[1]])
    start, context = 36, 20
    window = codes[:, start - context:start + HOP + LOOKAHEAD]
    with torch.inference_mode():
        full = codec.token_to_mel(codes, torch.tensor([0]), condition)[0, start * 4:(start + HOP) * 4]
        placed, unplaced = (codec.token_to_mel(window, torch.tensor([origin]), condition)[0, context * 4:][:HOP * 4]
                            for origin in (start - context, 0))
    torch.testing.assert_close(placed, full, rtol=0, atol=EXACT_ATOL)
    assert (unplaced - full).abs().max() > 0.01


def test_one_and_two_evaluations_both_run_and_differ(codecs, utterance):
    codes, condition = utterance
    one, two = (codecs[n].decode(codes[None, :24], condition[None]) for n in (1, 2))
    assert one.shape == two.shape == (1, 24 * SPF) and not torch.allclose(one, two, atol=1e-3)


def test_same_codes_and_condition_give_the_same_audio(codecs, utterance):
    codec, (codes, condition) = codecs[1], utterance
    first, again = (codec.decode_windows([(codes[:30], 6)], [condition])[0] for _ in range(2))
    assert torch.equal(first, again)
    other = codec.decode_windows([(codes[:30], 6)], [condition + 1.0])[0]
    default, zeros = (codec.decode_windows([(codes[:30], 6)], c)[0] for c in (None, [torch.zeros(320)]))
    assert not torch.allclose(first, other, atol=1e-3) and torch.equal(default, zeros)


def test_windows_of_any_lengths_and_places_decode_as_if_alone(codecs, utterance):
    """Equal lengths share a batch, others do not; each row keeps its own position and condition."""
    codec, (codes, condition) = codecs[1], utterance
    windows = [(codes[:24], 0), (codes[10:52], 18), (codes[30:60], 12), (codes[40:64], 6)]
    conditions, starts = [condition, -condition, None, condition], [0, 28, 42, 46]
    batched = codec.decode_windows(windows, conditions, starts)
    for window, c, start, audio in zip(windows, conditions, starts, batched):
        alone = codec.decode_windows([window], [c], [start])[0]
        assert audio.shape == ((window[0].shape[0] - window[1]) * SPF,)
        torch.testing.assert_close(audio, alone, rtol=0, atol=EXACT_ATOL)


def test_save_and_load_round_trip(codecs, utterance, tmp_path):
    codec, (codes, condition) = codecs[1], utterance
    codec.save_pretrained(tmp_path)
    loaded = FlashTTSCodec.from_pretrained(tmp_path)
    assert loaded.cfg == codec.cfg and loaded.shape == codec.shape
    assert torch.equal(loaded.transformer.text_embed.text_embed.weight, codec.transformer.text_embed.text_embed.weight)
    # the same weights in other memory (loaded by assignment) round differently in the CPU kernels: measured 9e-7
    torch.testing.assert_close(loaded.decode(codes[None, :24], condition[None]),
                               codec.decode(codes[None, :24], condition[None]), rtol=0, atol=EXACT_ATOL)


def test_flashtts_checkpoints_map_onto_our_names(codecs):
    """Its CFM's EMA state (`ema_model.transformer.*`, plus parts we do not hold) and its weight-normed HiFi-GAN
    `generator` state load strictly into ours."""
    codec = codecs[1]
    ema = {"ema_model." + k: v for k, v in codec.state_dict().items() if k.startswith("transformer.")}
    ema.update({"initted": torch.tensor(True), "step": torch.tensor(1), "ema_model.mel_spec.dummy": torch.tensor(0),
                "ema_model.transformer.input_embed.spk_encoder.fc.weight": torch.zeros(1),
                "ema_model.transformer.input_embed.conv_pos_embed.conv1d.0.weight": torch.zeros(1)})
    generator = HiFiGAN(codec.cfg.vocoder)
    generator.load_state_dict({k.removeprefix("vocoder."): v for k, v in codec.state_dict().items()
                               if k.startswith("vocoder.")})
    weight_norm(generator.conv_pre)
    state = serving_state(flashtts_state(ema, generator.state_dict()))
    fresh = FlashTTSCodec(codec.cfg)
    fresh.load_state_dict(state, strict=True)
    torch.testing.assert_close(fresh.vocoder.conv_pre.weight, codec.vocoder.conv_pre.weight, rtol=1e-6, atol=1e-7)


def test_weight_norm_folds_to_the_same_convolution():
    """Both spellings: torch's parametrization (original0 = g, original1 = v) and jik876's weight_g / weight_v."""
    conv = weight_norm(torch.nn.ConvTranspose1d(4, 2, 10, 5))
    state = {f"up.{k}": v for k, v in conv.state_dict().items()}
    old_style = {k.replace("parametrizations.weight.original0", "weight_g")
                  .replace("parametrizations.weight.original1", "weight_v"): v for k, v in state.items()}
    for folded in (fold_weight_norm(state), fold_weight_norm(old_style)):
        assert set(folded) == {"up.weight", "up.bias"}
        torch.testing.assert_close(folded["up.weight"], conv.weight.detach())


def test_shape_and_windowing(codecs):
    codec = codecs[1]
    assert (codec.num_codebooks, codec.codebook_size, codec.sample_rate) == (1, 6561, 24000)
    assert codec.samples_per_frame == SPF
    assert codec.shape.frame_rate == 25.0 and codec.condition_dim == 320
    assert codec.shape.window == CodecWindowing(18, 6, 0) == FlashTTSCodecConfig.full().windowing()
    assert FlashTTSCodecConfig.from_dict(codec.cfg.to_dict()) == codec.cfg
    with pytest.raises(ValueError, match="condition"):
        codec.decode_windows([(torch.zeros(4, 1, dtype=torch.long), 0)], [torch.zeros(192)])


def test_the_full_shapes_on_the_meta_device():
    """FlashTTS's DiT less the parts we do not hold, our assumed HiFi-GAN V1 at a 240 hop, and FlashTTS-0.5B's LM
    (Qwen2.5-0.5B + speech table and head + 5 MTP blocks of MLP 22016) as its config counts it."""
    voices = {v: torch.zeros(320) for v in FlashTTSConfig().voices}
    with torch.device("meta"):
        codec = FlashTTSCodec(FlashTTSCodecConfig.full())
        lm = FlashTTSLM(flashtts_0_5b(), tokenizer=None, voices=voices)
    count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    assert count(codec.transformer) == FLASHTTS_DIT_PARAMETERS - ECAPA_PARAMETERS - CONV_POS_PARAMETERS == 150_968_144
    assert count(codec.vocoder) == 13_786_753 and HiFiGANConfig().hop_length == 240
    assert count(lm) == flashtts_0_5b().num_parameters == 817_950_500
    assert count(lm.mtp_block) == 5 * 62_394_752 and lm.frames_per_step == 5


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    """The tiny preset, materialised in a fresh cache (restored afterwards)."""
    saved = os.environ.get("VOXLANE_CACHE")
    os.environ["VOXLANE_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield registry.resolve("flashtts-tiny")
    if saved is None:
        os.environ.pop("VOXLANE_CACHE")
    else:
        os.environ["VOXLANE_CACHE"] = saved


def test_the_family_through_the_registry(spec):
    lm, codec = registry.load_lm(spec, "cpu", "float32"), registry.load_codec(spec, "cpu", "float32")
    assert spec.family == "flashtts" and registry.resolve(str(spec.checkpoint)).family == "flashtts"
    full = registry.resolve("flashtts-0.5b")
    assert full.preset == "flashtts-0.5b"
    assert registry.codec_windowing(spec) == codec.shape.window == registry.codec_windowing(full)
    assert registry.preset_voices(spec) == lm.voices and registry.load_voice_encoder(spec, "cpu", "float32") is None
    assert lm.frame_rate == codec.shape.frame_rate and lm.vocab.num_codes == codec.codebook_size
    prompt = lm.encode_prompt("Hello world.", "bob")
    lm.allocate_slots(1, 64)
    lm.prefill(0, prompt)
    batch = DecodeBatch([0], [SamplingParams()], [torch.Generator().manual_seed(1)], [True])
    codes = torch.cat([lm.decode(batch)[0][0] for _ in range(6)])  # [12, 1]: 2 tokens per step
    audio = codec.decode_windows([(codes, 0)], [lm.codec_condition(prompt)])[0]
    assert codes.shape == (12, 1) and audio.shape == (12 * SPF,) and audio.abs().max() > 0


def test_the_engine_cuts_flashtts_chunks_and_they_join_into_the_full_decode(codecs):
    """The LM lane with FlashTTS's plan (18 new tokens a chunk, the codec's windowing) on the tiny LM's 2 tokens a
    step: chunks wait for 6 tokens of lookahead, carry 18 of context, their start frame and the voice; decoded
    and joined as the codec lane and the router do, they match a full decode of the stream."""
    lm, codec = FlashTTSLM.from_config(tiny(), seed=0), codecs[1]
    window = codec.shape.window
    plan = ChunkingConfig(first_chunk_frames=HOP, chunk_frames=HOP, chunk_growth=None)
    engine = make_engine(lm, codec_left_context_frames=window.left_context_frames,
                         codec_lookahead_frames=window.lookahead_frames, codec_overlap_frames=window.overlap_frames,
                         scheduler=SchedulerConfig(chunking=plan, admission_policy=AdmissionPolicyName.PREFILL_FIRST))
    seq, sink = make_seq(lm, "Hello there, a test of the engine.", frames=61)
    engine.add(seq)
    run_until_done(engine, [sink])
    assert sink.error is None
    assert [(c.num_new_frames, c.context_frames, c.lookahead_frames) for c in sink.chunks] == [
        (18, 0, 6), (18, 18, 6), (18, 18, 6), (7, 18, 0)]
    join, pieces = OverlapJoin(), []
    for c in sink.chunks:
        chunk = StreamChunk("s", c.tokens, c.context_frames, c.start_frame, lookahead_frames=c.lookahead_frames,
                            condition=c.condition)
        pieces.append(join.join(decode_windowed(codec, [chunk])[0].numpy(), c.overlap_frames * SPF))
    frames = torch.stack(seq.frames)
    full = codec.decode(frames[None], lm.codec_condition(seq.prompt)[None])[0]
    assert (torch.from_numpy(np.concatenate(pieces)) - full).abs().max() < END_ATOL
