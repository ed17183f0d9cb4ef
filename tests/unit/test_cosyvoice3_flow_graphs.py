"""CosyVoice 3's flow through its graph buffers: a batch padded into a bucket (more rows, more tokens) gives
the mel of the windows alone, which is what lets one graph per bucket serve every batch; HiFT on the padded
mel gives each window's audio but for its last samples (the source STFT's centring); on CUDA the graph's replay
equals the eager codec. Tiny random weights."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.cosyvoice3.codec import CosyVoice3Codec
from backend_python.models.cosyvoice3.codec_config import CosyVoice3CodecConfig
from backend_python.models.cosyvoice3.flow_graphs import FlowGraphs

torch.set_flush_denormal(True)
ATOL = 1e-5  # float32 on the CPU: padding must not change a valid frame (observed exact to rounding)


def make_codec(device: str = "cpu") -> CosyVoice3Codec:
    return CosyVoice3Codec.from_config(CosyVoice3CodecConfig.tiny(), device=device, dtype=torch.float32, seed=0)


def windows(device: str = "cpu"):
    generator = torch.Generator().manual_seed(3)
    return [(torch.randint(0, 6561, (n, 1), generator=generator).to(device), c) for n, c in ((6, 0), (13, 5), (10, 8))]


# HiFT on a padded mel: the samples that differ from HiFT on the window alone are its last ones, where the
# source's STFT is centred (reflection at the end against the padding's source); observed: the last 63
TAIL_SAMPLES = 96  # a tenth of a 40 ms frame; a window's lookahead (4 frames) holds them
TAIL_BOUND = 0.25  # of the window's peak: observed up to 0.11 over 12 speaker embeddings (tiny weights)


def speaker_conditions():
    generator = torch.Generator().manual_seed(5)
    return [torch.randn(192, generator=generator), None, torch.randn(192, generator=generator)]


def test_a_padded_bucket_gives_each_windows_own_mel():
    codec = make_codec()
    batch, conditions, starts = windows(), speaker_conditions(), [0, 40, 7]
    eager = codec.window_mels(batch, conditions, starts)
    codec.flow_graphs = FlowGraphs(codec.flow, codec.condition_dim, codec.cfg.n_timesteps, codec.cfg.cfg_rate,
                                   codec.device, batch_buckets=(4,), token_buckets=(16,), graphed=False)
    assert codec.flow_graphs.bucket_for(3, 13) == (4, 16)  # one more row, three more tokens of padding
    padded = codec.window_mels(batch, conditions, starts)
    for a, b in zip(eager, padded):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, rtol=0, atol=ATOL)
    assert codec.flow_graphs.bucket_for(5, 4) is None  # past the largest bucket: the plain flow


def test_a_padded_bucket_gives_each_windows_audio_but_its_last_samples():
    codec = make_codec()
    batch, conditions, starts = windows(), speaker_conditions(), [0, 40, 7]
    eager = codec.decode_windows(batch, conditions, starts)
    codec.flow_graphs = FlowGraphs(codec.flow, codec.condition_dim, codec.cfg.n_timesteps, codec.cfg.cfg_rate,
                                   codec.device, batch_buckets=(4,), token_buckets=(16,), graphed=False,
                                   vocoder=codec.hift)
    padded = codec.decode_windows(batch, conditions, starts)
    for a, b, (codes, context) in zip(eager, padded, batch):
        assert b.shape == a.shape == ((codes.shape[0] - context) * codec.samples_per_frame,)
        torch.testing.assert_close(b[:-TAIL_SAMPLES], a[:-TAIL_SAMPLES], rtol=0, atol=ATOL)
        assert (b[-TAIL_SAMPLES:] - a[-TAIL_SAMPLES:]).abs().max() < TAIL_BOUND * a.abs().max()
    without = FlowGraphs(codec.flow, codec.condition_dim, codec.cfg.n_timesteps, codec.cfg.cfg_rate, codec.device,
                         batch_buckets=(4,), token_buckets=(16,), graphed=False)
    assert without.run_audio(*codec.flow_inputs(batch, conditions, starts)) is None  # no vocoder: mel only


def test_hift_overlap_adds_as_torch_istft():
    from backend_python.models.cosyvoice3.hift import istft

    spec = torch.randn(3, 9, 50, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    window = torch.hann_window(16, periodic=True)
    torch.testing.assert_close(istft(spec, 16, 4, window), torch.istft(spec, 16, 4, 16, window=window),
                               rtol=0, atol=1e-6)


def test_off_cuda_no_graphs_are_captured():
    codec = make_codec()
    assert codec.capture_graphs() is False and codec.flow_graphs is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_the_graphs_replay_the_eager_flow_on_cuda():
    codec = make_codec("cuda")
    batch, starts = windows("cuda"), [0, 40, 7]
    eager = codec.window_mels(batch, None, starts)
    assert codec.capture_graphs() is True
    graphed = codec.window_mels(batch, None, starts)
    for a, b in zip(eager, graphed):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-4)
    codec.flow_graphs = None
    audio_eager = codec.decode_windows(batch, None, starts)
    assert codec.capture_graphs() is True
    audio_graphed = codec.decode_windows(batch, None, starts)  # the flow and HiFT in one replay
    for a, b in zip(audio_eager, audio_graphed):
        torch.testing.assert_close(b[:-TAIL_SAMPLES], a[:-TAIL_SAMPLES], rtol=0, atol=1e-3)
