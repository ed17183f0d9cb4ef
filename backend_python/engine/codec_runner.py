"""Runs a codec lane's batches: windowed decode, through CUDA graphs where the codec allows them."""
from __future__ import annotations

import torch

from backend_python.models.base import Codec
from backend_python.models.codec_graphs import CodecGraphs


class CodecRunner:
    """One codec plus, on CUDA, its graphs over batch and window-length buckets."""

    def __init__(self, codec: Codec, use_cuda_graphs: bool = True) -> None:
        self.codec = codec
        can_graph = use_cuda_graphs and codec.supports_cuda_graphs and codec.device.type == "cuda"
        self.graphs = CodecGraphs(codec) if can_graph else None

    def warm_up(self) -> None:
        """Capture every bucket up front (or run one eager window), so no request pays for it."""
        if self.graphs is not None:
            self.graphs.capture_all()
            return
        codes = torch.zeros(2, self.codec.num_codebooks, dtype=torch.long, device=self.codec.device)
        self.decode_windows([(codes, 0)])

    @torch.inference_mode()
    def decode_windows(self, windows: list[tuple[torch.Tensor, int]]) -> list[torch.Tensor]:
        """(codes [T_i, K] int64, context c_i) pairs -> each window's new samples, float32."""
        if self.graphs is None:
            return self.codec.decode_windows(windows)
        padded = self.codec.pad_windows(windows)
        return self.codec.new_samples(self.graphs.decode(padded), windows)
