"""TontaubeV1's codec (backend_python/models/tontaube/codec.py): DualCodec alone, or DualCodec re-synthesised through
VibeVoice's acoustic tokenizer as the reference does; streams decoded chunk by chunk, as the engine cuts them
(ChunkCutter, the family's chunk plan, left context and lookahead), against the whole stream decoded at once.

Measured on the tiny shapes (random weights; two streams of 133 and 150 frames decoded in one batch, and ten of 60):
- chunked vs whole, DualCodec alone: max <= 1.8e-3, rms <= 5.8e-5 (audio std 0.22): DAC's decoder is not
  causal, and 5 frames of lookahead and 27 of context bound, not remove, what a window misses;
- chunked vs whole, re-synthesised: max <= 3.7e-5, rms <= 6.5e-7 (audio std 0.11): DualCodec's window error
  carried through the tiny random VibeVoice, which adds none of its own and passes a small change of its input on
  at about 0.3 of its size (a trained one, an autoencoder, would pass it on at about 1: DualCodec's tolerance).
  Without the windows' stream positions (VibeVoice's frames laid from each window's start) the error is 0.86; with
  DualCodec's 27 frames of context alone, 0.013;
- given the whole stream's DualCodec audio, a VibeVoice window is exact from `lookback_samples` after its start
  (35 frames of 1,920 samples; float64: max 1.6e-7, transformers' RMSNorm rounding in float32), and wrong 5 frames
  before (frame 30: >= 3.6e-5 at every start);
- the re-synthesis of the whole stream is the reference's pipeline (DualCodec's audio, VibeVoice's mean latents,
  its decoder, clipped at ±1): equal; with the decoder streamed in 0.4 s pieces as the reference streams, max
  3.1e-6 (rounding).
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import torch

from backend_python.engine.chunk_cutter import ChunkCutter
from backend_python.engine.codec_runner import StreamChunk, decode_windowed
from backend_python.engine.sequence import Sequence
from backend_python.models import registry
from backend_python.models.base import CodecWindowing, SamplingParams
from backend_python.models.tontaube import family
from backend_python.models.tontaube.description import DESCRIPTION
from backend_python.models.tontaube.codec import (LEFT_CONTEXT_FRAMES, LOOKAHEAD_FRAMES, VIBEVOICE_DIR, TontaubeCodec,
                                                  left_context_frames)
from backend_python.models.tontaube.tiny import codec_config
from backend_python.models.tontaube.vibevoice import (HOP_LENGTH as VV_HOP, AcousticResynth, full_config,
                                                      lookback_samples, tiny_config)
from scheduler import ChunkPlan
from tests.golden import assert_float32_close, num_layers

torch.set_flush_denormal(True)

SPF = 1920
GRID = 5  # DualCodec frames a whole number of VibeVoice frames span (5 × 1,920 = 3 × 3,200 samples)
STREAMS = ((133, 0), (150, 1))  # (frames, seed): ragged ends, windows at every phase of VibeVoice's frames
# chunked vs whole, (max, rms): DualCodec alone measured <= 1.8e-3, 4.7e-5; re-synthesised <= 1.8e-5, 3.7e-7
WINDOW_TOLERANCE = {False: (3e-3, 1e-4), True: (2e-4, 5e-6)}  # by `has_vibevoice`
EXACT_ATOL = 1e-6  # a VibeVoice window past its reach (float64): measured 1.6e-7
PIPELINE_ATOL = 1e-6  # the reference's pipeline, VibeVoice decoded whole: the same arithmetic (measured 0)
STREAMED_ATOL = 3e-5  # ... its decoder streamed in pieces: convolutions of other lengths (measured 3.1e-6)


def codec_layers(codec: TontaubeCodec) -> int:
    """The layers a decode crosses: DualCodec's decoder, then VibeVoice's encoder and decoder where it has them."""
    return num_layers(codec.dualcodec, *((codec.resynth.model,) if codec.has_vibevoice else ()))


def random_codes(num_frames: int, seed: int) -> torch.Tensor:
    """[T, 4]: semantic codes < 16,384, acoustic < 4,096 (the tiny codec's codebooks are the model's)."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, 16384, (num_frames,), generator=g),
                        *torch.randint(0, 4096, (3, num_frames), generator=g)], dim=1)


@pytest.fixture(scope="module")
def dualcodec_only() -> TontaubeCodec:
    return TontaubeCodec.random(codec_config(), seed=0)


@pytest.fixture(scope="module")
def with_vibevoice() -> TontaubeCodec:
    return TontaubeCodec.random(codec_config(), seed=0, vibevoice_config=tiny_config())


@pytest.fixture(scope="module", params=["dualcodec_only", "with_vibevoice"])
def codec(request) -> TontaubeCodec:
    return request.getfixturevalue(request.param)


def engine_chunks(stream_id: str, codes: torch.Tensor, windowing: CodecWindowing) -> list[StreamChunk]:
    """The stream's chunks as the engine cuts them while its frames arrive one by one (ChunkCutter with the
    family's plan: a chunk waits for its lookahead, the last one takes what there is), as a codec lane gets them."""
    cutter = ChunkCutter(ChunkPlan(DESCRIPTION.chunk_plan), windowing)
    seq = Sequence(request_id=stream_id, prompt=None, sampling=SamplingParams(), ignore_eos=True,
                   max_frames=codes.shape[0], sink=None, generator=torch.Generator())
    chunks = []
    for frame in codes:
        seq.frames.append(frame)
        is_finished = seq.num_frames == codes.shape[0]
        chunks += cutter.cut(seq, is_finished=is_finished, is_done=is_finished)
    return [StreamChunk(stream_id, c.tokens, c.context_frames, c.start_frame, is_last=c.is_last,
                        lookahead_frames=c.lookahead_frames) for c in chunks]


def decode_streams(codec: TontaubeCodec, streams: list[torch.Tensor], windowing: CodecWindowing | None = None,
                   positions: bool = True) -> list[torch.Tensor]:
    """Every stream decoded chunk by chunk, all chunks in one batch (`decode_windowed`, the codec lanes' path);
    `positions` False: the windows' stream positions withheld."""
    windowing = windowing or codec.shape.window
    per_stream = [engine_chunks(f"s{i}", codes, windowing) for i, codes in enumerate(streams)]
    chunks = [c for stream in per_stream for c in stream]
    uses_stream_position = codec.uses_stream_position
    codec.uses_stream_position = uses_stream_position and positions
    try:
        audio = decode_windowed(codec, chunks)
    finally:
        codec.uses_stream_position = uses_stream_position
    out, start = [], 0
    for stream in per_stream:
        out.append(torch.cat(audio[start:start + len(stream)]))
        start += len(stream)
    return out


@pytest.fixture(scope="module")
def streams() -> list[torch.Tensor]:
    return [random_codes(frames, seed) for frames, seed in STREAMS]


def errors(chunked: list[torch.Tensor], whole: list[torch.Tensor]) -> tuple[float, float]:
    diff = torch.cat([c - w for c, w in zip(chunked, whole, strict=True)])
    return diff.abs().max().item(), diff.pow(2).mean().sqrt().item()


def test_the_chunk_plan_ends_every_chunk_on_the_vibevoice_grid():
    """5, 10, 20, then 25 frames: every chunk but a stream's last ends a whole number of VibeVoice frames in."""
    plan = ChunkPlan(DESCRIPTION.chunk_plan)
    ends = [span.end for span in plan.ready_chunks(400, 0, is_finished=False)]
    assert ends[:5] == [5, 15, 35, 60, 85]
    assert all(end % GRID == 0 for end in ends)


def test_chunked_windows_match_the_whole_stream(codec, streams):
    chunks = engine_chunks("s", streams[1], codec.shape.window)
    assert max(c.context_frames for c in chunks) == codec.left_context_frames  # windows at full context
    assert {c.lookahead_frames for c in chunks} == {LOOKAHEAD_FRAMES, 0}
    whole = [codec.decode(codes[None])[0] for codes in streams]
    chunked = decode_streams(codec, streams)
    assert [a.shape for a in chunked] == [w.shape for w in whole] == [(f * SPF,) for f, _ in STREAMS]
    assert min(w.std().item() for w in whole) > 0.1  # speech-level random audio (0.22; re-synthesised 0.11)
    max_error, rms_error = errors(chunked, whole)
    max_tolerance, rms_tolerance = WINDOW_TOLERANCE[codec.has_vibevoice]
    assert max_error <= max_tolerance and rms_error <= rms_tolerance


def test_vibevoice_windows_need_their_stream_position_and_vibevoice_s_context(with_vibevoice, streams):
    """The same chunks without their stream positions (VibeVoice's frames laid from each window's start), or
    with DualCodec's context alone, are far off."""
    whole = [with_vibevoice.decode(codes[None])[0] for codes in streams]
    tolerance = WINDOW_TOLERANCE[True][0]
    assert errors(decode_streams(with_vibevoice, streams, positions=False), whole)[0] > 1000 * tolerance  # 0.86
    dualcodec_context = CodecWindowing(LEFT_CONTEXT_FRAMES, LOOKAHEAD_FRAMES)
    assert errors(decode_streams(with_vibevoice, streams, dualcodec_context), whole)[0] > 20 * tolerance  # 0.013


def test_a_vibevoice_window_is_exact_from_its_reach_on(with_vibevoice, streams):
    """Given the whole stream's DualCodec audio, a window that starts anywhere re-synthesises it exactly from
    `lookback_samples` on (in whole frames: the context VibeVoice adds), and is wrong 5 frames before. In
    float64, so that exact means rounding (transformers' RMSNorm still rounds to float32)."""
    codec, codes = copy.deepcopy(with_vibevoice), streams[0]
    codec.vibevoice.double()
    reach = codec.left_context_frames - LEFT_CONTEXT_FRAMES
    assert reach == -(-lookback_samples(tiny_config()) // SPF) == 35
    audio = codec.dualcodec_audio(codes[None]).double()
    whole = codec.resynthesise(audio, [0], codes.shape[0])[0]
    for first in (20, 23, 31, 44, 57):  # every phase against VibeVoice's 3,200-sample frames
        window = codec.resynthesise(audio[:, first * SPF:], [codec.head_samples(first)], codes.shape[0] - first)[0]
        error = (window - whole[first * SPF:]).abs()
        assert error[reach * SPF:].max() <= EXACT_ATOL, first
        assert error[(reach - 5) * SPF:(reach - 4) * SPF].max() > 10 * EXACT_ATOL, first  # measured >= 5.2e-5


def test_the_lookback_is_the_tiny_tokenizer_s_measured_receptive_field():
    """The derived reach (exact index arithmetic over kernels and strides) against autograd on the tiny tokenizer
    (float64, layer scales 1 so that every block reads its whole kernel): at each of these phases of a frame, an
    output sample's first waveform dependency, and their maximum (phase 2,589) is `lookback_samples`."""
    resynth = AcousticResynth.random(tiny_config(), seed=0, layer_scale=1.0)
    model = resynth.model.double()
    wav = torch.randn(1, 1, 40 * VV_HOP, dtype=torch.float64, requires_grad=True)
    audio = model.decode(model.encode(wav, sample=False).latents).audio[0, 0]
    reach = []
    for sample in (35 * VV_HOP + phase for phase in (0, 1000, 2589, 3199)):
        grad, = torch.autograd.grad(audio[sample], wav, retain_graph=True)
        reach.append(sample - grad[0, 0].nonzero().min().item())
    assert reach == [63390, 64390, 65979, 63389]
    assert max(reach) == lookback_samples(tiny_config())


def test_the_full_tokenizer_s_reach_and_the_left_context():
    """VibeVoice-1.5B's acoustic tokenizer reads 374,323 samples (15.6 s) back: 222 frames of left context with
    DualCodec's 27; the random full preset's windowing says so without building weights."""
    assert lookback_samples(full_config()) == 374323
    assert left_context_frames(full_config()) == 222 and left_context_frames() == LEFT_CONTEXT_FRAMES == 27
    spec = registry.ModelSpec("tontaube-2.9b", "tontaube", preset="tontaube-2.9b")
    assert family.codec_windowing(spec) == CodecWindowing(222, LOOKAHEAD_FRAMES, 0)
    assert family.codec_left_context_frames(spec) == 222


def test_the_vibevoice_path_is_the_reference_s_pipeline(with_vibevoice, dualcodec_only, streams):
    """The whole stream as the reference makes it: DualCodec's audio (1920 · T − 16 samples at the tiny shape),
    VibeVoice's mean latents (its partial last frame padded up), its decoder streamed in pieces of 3 frames (0.4 s,
    the reference's quantum) from one cache, clipped at ±1 (its PCM writers clip)."""
    codec, codes = with_vibevoice, streams[0]
    dualcodec = codec.dualcodec.decode(codes[None, :, 0], codes[None, :, 1:].transpose(1, 2))
    assert dualcodec.shape == (1, codes.shape[0] * SPF - 16)
    latents = codec.resynth.encode_mean(dualcodec)
    assert latents.shape[1] == -(-dualcodec.shape[1] // VV_HOP)
    decoded = codec.decode(codes[None])
    whole = codec.resynth.decode(latents)[:, :codes.shape[0] * SPF].clamp(-1.0, 1.0)
    torch.testing.assert_close(decoded, whole, rtol=0, atol=PIPELINE_ATOL)
    stream = codec.resynth.start_stream()
    pieces = [codec.resynth.decode_stream(stream, latents[:, i:i + 3]) for i in range(0, latents.shape[1], 3)]
    streamed = torch.cat(pieces, dim=-1)[:, :codes.shape[0] * SPF].clamp(-1.0, 1.0)
    torch.testing.assert_close(decoded, streamed, rtol=0, atol=STREAMED_ATOL)
    assert (decoded - dualcodec_only.decode(codes[None])).abs().max() > 0.3  # not DualCodec's audio


def copy_codec_folders(source: Path, target: Path) -> Path:
    for folder in ("dualcodec", VIBEVOICE_DIR):
        shutil.copytree(source / folder, target / folder)
    return target


def test_a_checkpoint_without_vibevoice_decodes_dualcodec_alone(tmp_path, with_vibevoice, dualcodec_only, streams):
    """tontaube-tiny's codec re-synthesises (its `vibevoice/`, the tiny random tokenizer); the same checkpoint
    without the folder, or loaded with `vibevoice=False`, decodes DualCodec alone, with DualCodec's windowing
    (and no stream positions); the family reads the windowing from the folders."""
    built = registry.resolve("tontaube-tiny").checkpoint
    path = copy_codec_folders(built, tmp_path / "ckpt")
    codes = streams[0][None, :40]
    spec = registry.ModelSpec("ckpt", "tontaube", checkpoint=path)
    loaded = TontaubeCodec.from_dir(path)
    assert loaded.has_vibevoice and loaded.uses_stream_position and loaded.left_context_frames == 62
    assert family.codec_windowing(spec) == loaded.shape.window == CodecWindowing(62, LOOKAHEAD_FRAMES, 0)
    # the checkpoint holds seed 0's weights as the machine that built it drew them: equal to this one's to rounding
    assert_float32_close(loaded.decode(codes), with_vibevoice.decode(codes), codec_layers(with_vibevoice))
    alone = TontaubeCodec.from_dir(path, vibevoice=False)
    assert not alone.has_vibevoice and alone.left_context_frames == LEFT_CONTEXT_FRAMES
    shutil.rmtree(path / VIBEVOICE_DIR)
    without = TontaubeCodec.from_dir(path)
    assert not without.has_vibevoice and not without.uses_stream_position
    assert without.shape.window == family.codec_windowing(spec) == CodecWindowing(27, LOOKAHEAD_FRAMES, 0)
    for codec in (alone, without):
        assert_float32_close(codec.decode(codes), dualcodec_only.decode(codes), codec_layers(dualcodec_only))
    with pytest.raises(FileNotFoundError, match=VIBEVOICE_DIR):
        TontaubeCodec.from_dir(path, vibevoice=True)


def test_the_reference_s_extracted_tokenizer_folder_loads_as_vibevoice(tmp_path):
    """`vibevoice/` may be the reference's extraction (its config fields, its names): the codec loads it, and the
    family's windowing reads its reach from that config."""
    import json

    from safetensors.torch import save_file

    fixture = torch.load(Path(__file__).parents[1] / "fixtures" / "tontaube_vibevoice_golden.pt")
    path = copy_codec_folders(registry.resolve("tontaube-tiny").checkpoint, tmp_path / "ckpt")
    shutil.rmtree(path / VIBEVOICE_DIR)
    (path / VIBEVOICE_DIR).mkdir()
    (path / VIBEVOICE_DIR / "config.json").write_text(json.dumps(fixture["config"]))
    save_file({k: v.float().contiguous() for k, v in fixture["state"].items()},
              str(path / VIBEVOICE_DIR / "model.safetensors"))
    codec = TontaubeCodec.from_dir(path)
    assert codec.has_vibevoice and codec.left_context_frames == 62
    assert family.codec_windowing(registry.ModelSpec("ckpt", "tontaube", checkpoint=path)) == codec.shape.window
    assert_float32_close(codec.resynth.encode_mean(fixture["waveform"].float()), fixture["latents"],
                         num_layers(codec.resynth.model.encoder))


def test_decode_windows_checks_its_start_frames(with_vibevoice):
    window = (random_codes(12, seed=5), 2)
    with pytest.raises(ValueError, match="one start frame per window"):
        with_vibevoice.decode_windows([window], start_frames=[2, 7])
    # without start frames a window starts its stream (as the runner's warm-up decodes one)
    alone = with_vibevoice.decode_windows([window])[0]
    torch.testing.assert_close(alone, with_vibevoice.decode_windows([window], start_frames=[2])[0], rtol=0, atol=0)
    assert alone.shape == (10 * SPF,)
