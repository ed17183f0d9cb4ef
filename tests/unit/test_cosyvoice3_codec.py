"""CosyVoice 3 codec: chunked windows vs a full decode, determinism, batching, checkpoints, sizes.

Golden chunked-vs-full (tiny codec, random weights, 60 frames; windows cut as the engine cuts them: chunks
2, 4, 8, 10, 10, ..., 32 frames of left context, 4 of lookahead, 1 overlap frame cross-faded into the next
chunk; all windows decoded in one batch with their stream start frames). Measured (seeds 0, 1, 2):
- given the full decode's mel, HiFT's windows are exact: max 6.1e-7 (the phase restart grid; without
  restarts a window's phase is off and its audio by > 0.02);
- the flow's mel (new frames): rms 0.023-0.025, max 0.135-0.141 (mel std 1.66): the DiT attends outside any
  window. Without start frames (noise from the window's own start): rms 1.15-1.16, max 6.3-6.6;
- the waveform: rms 0.016-0.020, max 0.13-0.17 (audio std 0.032): mel errors move f0, and f0 errors
  accumulate in the source's phase until its next restart.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from backend_python.models.base import CodecWindowing
from backend_python.models.cosyvoice3.codec import CONFIG_FILE, CosyVoice3Codec, CosyVoice3CodecConfig, crossfade
from backend_python.models.cosyvoice3.codec_checkpoint import config_from_yaml, read_hyperpyyaml
from backend_python.models.cosyvoice3.hift import fold_weight_norm
from backend_python.vox_ensemble.overlap_join import OverlapJoin

torch.set_flush_denormal(True)

SPF, MEL_PER_FRAME = 960, 2
NUM_FRAMES = 60
CHUNK_PLAN = (2, 4, 8, 10)  # the engine's default chunk sizes (then 10, 10, ...)
HIFT_EXACT_ATOL = 1e-5  # measured 6.1e-7
MEL_RMS, MEL_MAX = 0.035, 0.2  # measured 0.023-0.025 and 0.135-0.141
WAV_RMS, WAV_MAX = 0.025, 0.25  # measured 0.016-0.020 and 0.13-0.17
NO_START_MEL_RMS = 0.5  # at least: measured 1.15-1.16 (the noise of other stream positions)
BATCH_ATOL = 1e-5


def random_codes(num_frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 6561, (num_frames, 1), generator=torch.Generator().manual_seed(seed))


def random_condition(seed: int) -> torch.Tensor:
    return torch.randn(192, generator=torch.Generator().manual_seed(seed))


def chunk_bounds(num_frames: int) -> list[tuple[int, int]]:
    bounds, start = [], 0
    while start < num_frames:
        size = CHUNK_PLAN[min(len(bounds), len(CHUNK_PLAN) - 1)]
        bounds.append((start, min(start + size, num_frames)))
        start = bounds[-1][1]
    return bounds


def engine_windows(codes: torch.Tensor, codec: CosyVoice3Codec) -> list[tuple[torch.Tensor, int, int, int]]:
    """(window codes, context, lookahead, start frame) per chunk, as the engine's ChunkCutter cuts them."""
    out, num_frames = [], codes.shape[0]
    for start, end in chunk_bounds(num_frames):
        context, lookahead = min(codec.left_context_frames, start), min(codec.lookahead_frames, num_frames - end)
        out.append((codes[start - context:end + lookahead], context, lookahead, start))
    return out


def join_chunks(codec: CosyVoice3Codec, windows, audio: list[torch.Tensor]) -> torch.Tensor:
    """What a client hears: each chunk's new samples, its start cross-faded with the previous chunk's tail."""
    pieces, tail = [], None
    for (codes, context, lookahead, _), samples in zip(windows, audio):
        num_new = codes.shape[0] - context - lookahead
        num_tail = min(codec.overlap_frames, lookahead) * SPF
        new = samples[: num_new * SPF]
        pieces.append(new if tail is None else crossfade(tail, new))
        tail = samples[num_new * SPF: num_new * SPF + num_tail] if num_tail else None
    return torch.cat(pieces)


@pytest.fixture(scope="module")
def codec() -> CosyVoice3Codec:
    return CosyVoice3Codec.from_config(CosyVoice3CodecConfig.tiny(), seed=0)


@pytest.fixture(scope="module")
def utterance(codec):
    """codes [60, 1], condition [192], and their full decode: mel [120, 80], audio [57600]."""
    codes, condition = random_codes(NUM_FRAMES, seed=0), random_condition(seed=0)
    mel = codec.window_mels([(codes, 0)], [condition])[0]
    audio = codec.decode_windows([(codes, 0)], [condition])[0]
    return codes, condition, mel, audio


def test_chunked_windows_match_a_full_decode(codec, utterance):
    codes, condition, full_mel, full_audio = utterance
    windows = engine_windows(codes, codec)
    pairs, starts = [(w, c) for w, c, _, _ in windows], [s for _, _, _, s in windows]
    mels = codec.window_mels(pairs, [condition] * len(pairs), starts)
    new_mel = torch.cat([m[c * MEL_PER_FRAME:(w.shape[0] - a) * MEL_PER_FRAME]
                         for m, (w, c, a, _) in zip(mels, windows)])
    mel_error = (new_mel - full_mel).abs()
    assert full_mel.std() > 1.0
    assert mel_error.max() <= MEL_MAX and mel_error.pow(2).mean().sqrt() <= MEL_RMS
    audio = join_chunks(codec, windows, codec.decode_windows(pairs, [condition] * len(pairs), starts))
    wav_error = (audio - full_audio).abs()
    assert audio.shape == full_audio.shape and full_audio.std() > 0.02
    assert wav_error.max() <= WAV_MAX and wav_error.pow(2).mean().sqrt() <= WAV_RMS


def test_hift_windows_are_exact_given_the_full_decodes_mel(codec, utterance):
    """The vocoder's share of the window error is nil: 32 frames of context always hold a phase restart."""
    codes, _, full_mel, full_audio = utterance
    windows = engine_windows(codes, codec)
    mels = [full_mel[(s - c) * MEL_PER_FRAME:(s - c + w.shape[0]) * MEL_PER_FRAME] for w, c, _, s in windows]
    audio = codec.vocode(mels, [(s - c) * MEL_PER_FRAME for _, c, _, s in windows])
    for (w, c, a, s), samples in zip(windows, audio):
        num_new = w.shape[0] - c - a
        expected = full_audio[s * SPF:(s + num_new) * SPF]
        torch.testing.assert_close(samples[c * SPF:(c + num_new) * SPF], expected, rtol=0, atol=HIFT_EXACT_ATOL)


def test_without_restarts_the_sine_phase_differs_in_windows(codec, utterance):
    """Guards the test above: with the reference's running phase the same windows are far off."""
    codes, _, full_mel, _ = utterance
    running = CosyVoice3Codec(replace(codec.cfg, hift=replace(codec.cfg.hift, phase_reset_frames=0)))
    running.load_state_dict(codec.state_dict())
    running.prepare("cpu", torch.float32)
    full = running.vocode([full_mel])[0]
    start, context, end = 47, 32, 57
    window = running.vocode([full_mel[(start - context) * 2:(end + 4) * 2]], [(start - context) * 2])[0]
    assert (window[context * SPF:(context + end - start) * SPF] - full[start * SPF:end * SPF]).abs().max() > 0.02


def test_windows_without_start_frames_start_from_other_noise(codec, utterance):
    """Why the codec wants each window's start frame: without it a window's noise is that of stream frame 0."""
    codes, condition, full_mel, _ = utterance
    windows = engine_windows(codes, codec)[3:]  # chunks that do not start at frame 0
    mels = codec.window_mels([(w, c) for w, c, _, _ in windows], [condition] * len(windows))
    errors = torch.cat([(m[c * 2:(w.shape[0] - a) * 2] - full_mel[s * 2:(s + w.shape[0] - c - a) * 2]).flatten()
                        for m, (w, c, a, s) in zip(mels, windows)])
    assert errors.pow(2).mean().sqrt() >= NO_START_MEL_RMS


def test_same_codes_and_condition_give_the_same_audio(codec):
    codes, condition = random_codes(12, seed=1), random_condition(seed=1)
    first = codec.decode_windows([(codes, 2)], [condition], [5])[0]
    assert torch.equal(first, codec.decode_windows([(codes, 2)], [condition], [5])[0])
    other = codec.decode_windows([(codes, 2)], [random_condition(seed=2)], [5])[0]
    assert (first - other).abs().max() > 1e-3
    default = codec.decode_windows([(codes, 2)], [None], [5])[0]
    assert torch.equal(default, codec.decode_windows([(codes, 2)], [torch.zeros(192)], [5])[0])
    assert torch.equal(codec.decode(codes[None])[0], codec.decode_windows([(codes, 0)])[0])


def test_batched_windows_decode_as_if_alone(codec):
    """Different lengths, contexts, conditions and start frames in one call: padding is masked in the flow."""
    specs = ((9, 3, 1, 40), (4, 0, None, 0), (14, 6, 2, 17), (9, 2, 3, 1))  # frames, context, condition seed, start
    windows = [(random_codes(n, seed=n + 10), c) for n, c, _, _ in specs]
    conditions = [None if seed is None else random_condition(seed) for _, _, seed, _ in specs]
    starts = [start for *_, start in specs]
    batched = codec.decode_windows(windows, conditions, starts)
    for window, condition, start, audio in zip(windows, conditions, starts, batched):
        alone = codec.decode_windows([window], [condition], [start])[0]
        assert audio.shape == ((window[0].shape[0] - window[1]) * SPF,)
        torch.testing.assert_close(audio, alone, rtol=0, atol=BATCH_ATOL)


def test_save_and_load_round_trip(codec, tmp_path):
    codec.save_pretrained(tmp_path / "codec")
    assert (tmp_path / "codec" / CONFIG_FILE).exists()
    loaded = CosyVoice3Codec.from_pretrained(tmp_path)  # finds codec/ inside a checkpoint dir
    assert loaded.cfg == codec.cfg
    codes = random_codes(8, seed=3)
    assert torch.equal(loaded.decode(codes[None]), codec.decode(codes[None]))
    fewer_steps = CosyVoice3Codec.from_pretrained(tmp_path / "codec", n_timesteps=2)
    assert fewer_steps.cfg.n_timesteps == 2
    assert (fewer_steps.decode(codes[None]) - codec.decode(codes[None])).abs().max() > 1e-4


TINY_YAML = """\
__set_seed1: !apply:random.seed [1986]
sample_rate: 24000
spk_embed_dim: 192
token_frame_rate: 25
token_mel_ratio: 2
chunk_size: 25
flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT
    input_size: 80
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    pre_lookahead_layer: !new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer
        in_channels: 80
        channels: 64
        pre_lookahead_len: 3
    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
        in_channels: 240
        cfm_params: !new:omegaconf.DictConfig
            content:
                t_scheduler: 'cosine'
                inference_cfg_rate: 0.7
        estimator: !new:cosyvoice.flow.DiT.dit.DiT
            dim: 64
            depth: 2
            heads: 4
            dim_head: 16
            ff_mult: 2
            mel_dim: 80
            mu_dim: 80
            spk_dim: 80
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
hift: !new:cosyvoice.hifigan.generator.CausalHiFTGenerator
    in_channels: 80
    base_channels: 32
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 5, 3]
    upsample_kernel_sizes: [16, 11, 7]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: [7, 7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99
    conv_pre_look_right: 4
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.CausalConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: 32
"""
WEIGHT_NORMED = ("conv_pre.", "ups.", "resblocks.", "conv_post.", "f0_predictor.condnet.")  # hift.pt's


def unfold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Plain weights as torch's weight-norm parametrizations store them (g = ||w|| per output, v = w)."""
    out = {}
    for key, value in state.items():
        if key.endswith(".weight") and key.startswith(WEIGHT_NORMED) and value.dim() == 3:
            prefix = key[: -len(".weight")]
            out[f"{prefix}.parametrizations.weight.original0"] = value.flatten(1).norm(dim=1).view(-1, 1, 1)
            out[f"{prefix}.parametrizations.weight.original1"] = value
        else:
            out[key] = value
    return out


def test_an_official_model_dir_loads(codec, tmp_path):
    """flow.pt, hift.pt (weight norm unfolded, 'generator.' prefixed) and cosyvoice3.yaml, as the reference's."""
    state = codec.state_dict()
    flow = {k.removeprefix("flow."): v for k, v in state.items() if k.startswith("flow.")}
    hift = unfold_weight_norm({k.removeprefix("hift."): v.float() for k, v in state.items() if k.startswith("hift.")})
    torch.save(flow, tmp_path / "flow.pt")
    torch.save({f"generator.{k}": v for k, v in hift.items()}, tmp_path / "hift.pt")
    (tmp_path / "cosyvoice3.yaml").write_text(TINY_YAML)
    loaded = CosyVoice3Codec.from_pretrained(tmp_path, n_timesteps=10)
    assert loaded.cfg == codec.cfg
    codes = random_codes(10, seed=4)
    torch.testing.assert_close(loaded.decode(codes[None]), codec.decode(codes[None]), rtol=0, atol=1e-5)


def test_old_style_weight_norm_folds_too():
    v, g = torch.randn(4, 3, 5), torch.rand(4, 1, 1) + 0.5
    folded = fold_weight_norm({"conv.weight_g": g, "conv.weight_v": v, "conv.bias": torch.zeros(4)})
    assert set(folded) == {"conv.weight", "conv.bias"}
    torch.testing.assert_close(folded["conv.weight"].flatten(1).norm(dim=1), g.flatten())


def test_the_full_config_has_the_references_size():
    """cosyvoice3.yaml's sizes; counts measured on the reference's modules (meta device): flow 332,257,088;
    HiFT 20,779,887, of which 14,290 are weight norm's gains that our folded weights do not keep."""
    with torch.device("meta"):
        full = CosyVoice3Codec(CosyVoice3CodecConfig.full())
    assert sum(p.numel() for p in full.flow.parameters()) == 332_257_088
    assert sum(p.numel() for p in full.hift.parameters()) == 20_779_887 - 14_290


def test_the_yaml_reader_resolves_references_and_ignores_tags():
    conf = read_hyperpyyaml(TINY_YAML)
    assert conf["flow"]["spk_embed_dim"] == 192 and conf["hift"]["sampling_rate"] == 24000
    assert conf["flow"]["decoder"]["estimator"]["static_chunk_size"] == "<chunk_size> * <token_mel_ratio>"
    assert config_from_yaml(conf) == CosyVoice3CodecConfig.tiny()


def test_crossfade_is_the_routers():
    tail, head = torch.randn(960), torch.randn(2400)
    join = OverlapJoin()
    join.join(np.concatenate([np.zeros(100, np.float32), tail.numpy()]), num_tail=960)
    expected = join.join(head.numpy(), num_tail=0)
    torch.testing.assert_close(crossfade(tail, head), torch.from_numpy(expected), rtol=0, atol=1e-6)


def test_shape_config_and_checks(codec):
    assert (codec.num_codebooks, codec.codebook_size, codec.sample_rate, codec.samples_per_frame,
            codec.condition_dim) == (1, 6561, 24000, SPF, 192)
    cfg = codec.cfg
    assert CosyVoice3CodecConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.windowing == codec.shape.window == CodecWindowing(32, 4, 1)
    assert codec.decode(random_codes(3, seed=5)[None]).abs().max() <= 1.0
    with pytest.raises(ValueError, match="condition"):
        codec.decode_windows([(random_codes(3, seed=5), 0)], [torch.zeros(80)])
    with pytest.raises(ValueError, match="codes"):
        codec.decode(torch.zeros(1, 3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="overlap"):
        CosyVoice3CodecConfig.tiny(lookahead_frames=1, overlap_frames=2)
