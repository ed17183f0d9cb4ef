"""The codec lanes' runner: padded windows equal one-by-one decodes (CPU); graph replay equals the
eager decode for every bucket shape, including padded rows and frames (CUDA)."""
from __future__ import annotations

import pytest
import torch

from backend_python.engine.codec_runner import CodecRunner
from backend_python.models.graphs.codec import CodecGraphs
from backend_python.models.graphs.buffers import smallest_at_least
from backend_python.models.qwen3_tts.codec import Qwen3TTSCodec
from backend_python.models.qwen3_tts.codec_config import tiny_codec_config

torch.set_flush_denormal(True)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ATOL = 1e-5  # fp32: the padded batch and a lone window run the same causal arithmetic
# CUDA, fp32 without TF32: a bucket pads the shape, so convs pick other algorithms (another summation
# order); a wrong pad or a stale static buffer shows up as errors of order 1e-1.
CUDA_ATOL = 1e-4


def windows_for(codec: Qwen3TTSCodec, shapes: list[tuple[int, int]], device: str = "cpu") -> list:
    generator = torch.Generator().manual_seed(7)
    return [(torch.randint(0, codec.codebook_size, (frames, codec.num_codebooks), generator=generator).to(device),
             context) for frames, context in shapes]


SHAPES = [(2, 0), (29, 25), (6, 2), (35, 25), (12, 4)]


def test_runner_without_graphs_matches_each_window_alone():
    codec = Qwen3TTSCodec.from_config(tiny_codec_config(), seed=3)
    runner = CodecRunner(codec)
    assert runner.graphs is None  # CPU: eager
    windows = windows_for(codec, SHAPES)
    batched = runner.decode_windows(windows)
    for (codes, context), audio in zip(windows, batched):
        alone = codec.decode(codes[None])[0, context * codec.samples_per_frame:]
        assert audio.shape == alone.shape == ((codes.shape[0] - context) * codec.samples_per_frame,)
        torch.testing.assert_close(audio, alone, atol=ATOL, rtol=0)


def test_graphs_refuse_a_cpu_codec():
    codec = Qwen3TTSCodec.from_config(tiny_codec_config(), seed=3)
    with pytest.raises(ValueError, match="CUDA"):
        CodecGraphs(codec)


def test_smallest_bucket():
    assert smallest_at_least((1, 2, 4, 8), 3) == 4
    assert smallest_at_least((1, 2, 4, 8), 8) == 8
    assert smallest_at_least((1, 2, 4, 8), 9) is None


@needs_cuda
def test_graph_replay_equals_eager_decode_across_buckets(no_tf32):
    codec = Qwen3TTSCodec.from_config(tiny_codec_config(), device="cuda", seed=3)
    runner = CodecRunner(codec)
    assert runner.graphs is not None
    runner.warm_up()
    for shapes in (SHAPES, SHAPES[:1], SHAPES * 6, [(60, 25)]):  # several buckets, one beyond the largest
        windows = windows_for(codec, shapes, device="cuda")
        graphed = runner.decode_windows(windows)
        eager = codec.decode_windows(windows)
        for g, e in zip(graphed, eager):
            torch.testing.assert_close(g, e, atol=CUDA_ATOL, rtol=0)
