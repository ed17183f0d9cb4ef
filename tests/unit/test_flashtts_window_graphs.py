"""FlashTTS's codec through its window graphs' buffers: a batch padded with rows into a bucket gives each window
its own audio (rows are independent), only the chunk plan's window lengths have graphs, and on CUDA a graph's
replay equals the eager codec. Tiny random weights."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.flashtts import FlashTTSCodec, FlashTTSCodecConfig
from backend_python.models.flashtts.codec import plan_window_lengths
from backend_python.models.flashtts.window_graphs import WindowGraphs

ATOL = 1e-5  # float32 on the CPU: padding rows must not change a real row (observed exact to rounding)


def make_codec(device: str = "cpu") -> FlashTTSCodec:
    return FlashTTSCodec.from_config(FlashTTSCodecConfig.tiny(), device=device, dtype=torch.float32, seed=0)


def batch(device: str = "cpu"):
    """Three windows as the lane sends them: two steady (42 tokens), one first chunk (24), one last chunk (30)."""
    generator = torch.Generator().manual_seed(7)
    shapes = ((42, 18, 54), (24, 0, 0), (42, 18, 18), (30, 18, 72))  # (tokens, context, first new token)
    windows = [(torch.randint(0, 6561, (n, 1), generator=generator).to(device), c) for n, c, _ in shapes]
    conditions = [torch.randn(320, generator=generator).to(device), None, None,
                  torch.randn(320, generator=generator).to(device)]
    return windows, conditions, [start for _, _, start in shapes]


def test_the_plans_windows_are_graphed_and_padding_rows_change_no_window():
    codec = make_codec()
    assert plan_window_lengths(codec.cfg) == (24, 42)
    windows, conditions, starts = batch()
    eager = codec.decode_windows(windows, conditions, starts)
    codec.window_graphs = WindowGraphs(codec, plan_window_lengths(codec.cfg), batch_buckets=(4,), graphed=False)
    assert codec.window_graphs.bucket_for(2, 42) == (4, 42)  # two more rows of padding
    assert codec.window_graphs.bucket_for(1, 30) is None  # a last chunk: eager
    assert codec.window_graphs.bucket_for(5, 42) is None  # past the largest bucket: eager
    padded = codec.decode_windows(windows, conditions, starts)
    for a, b in zip(eager, padded):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, rtol=0, atol=ATOL)


def test_off_cuda_no_graphs_are_captured():
    codec = make_codec()
    assert codec.capture_graphs() is False and codec.window_graphs is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_the_graphs_replay_the_eager_codec_on_cuda():
    codec = make_codec("cuda")
    windows, conditions, starts = batch("cuda")
    eager = codec.decode_windows(windows, conditions, starts)
    assert codec.capture_graphs() is True
    graphed = codec.decode_windows(windows, conditions, starts)
    for a, b in zip(eager, graphed):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-4)
