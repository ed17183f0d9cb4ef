"""The code predictor (`talker.code_predictor`): codebooks 1..G-1 of a frame, one small step each.

Per frame its input sequence is [talker hidden state, embedding of code 0, embedding of code 1, ...];
step i reads `lm_head[i]` and the next input embeds the sampled code with `codec_embedding[i]`.
It keeps its own tiny cache of G positions per row, rewritten for every frame.
"""
from __future__ import annotations

import torch
from torch import nn

from ..kernels.fused_linear import fused_linear
from ..kernels.sampler import NoiseKeys, fused_sample
from ..layers.decoder import DecoderStack, KVCache, Step
from ..layers.sampling import BatchSampling, sample
from .config import CodePredictorConfig


class CodePredictorModel(DecoderStack):
    """`talker.code_predictor.model`: layers plus one embedding table per codebook 1..G-1 (talker width)."""

    def __init__(self, cfg: CodePredictorConfig, embedding_dim: int) -> None:
        super().__init__(cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads,
                         cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps)
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.vocab_size, embedding_dim) for _ in range(cfg.num_code_groups - 1))


class CodePredictor(nn.Module):
    def __init__(self, cfg: CodePredictorConfig, talker_hidden_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = CodePredictorModel(cfg, talker_hidden_size)
        self.lm_head = nn.ModuleList(
            nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) for _ in range(cfg.num_code_groups - 1))
        # the 1.7B talker is wider than its predictor; the 0.6B's are equal (no parameters then)
        self.small_to_mtp_projection: nn.Module = (
            nn.Linear(talker_hidden_size, cfg.hidden_size, bias=True)
            if cfg.hidden_size != talker_hidden_size else nn.Identity())
        self.sample = sample  # `Qwen3TTSLM._compile` swaps in the compiled sampler

    def allocate_cache(self, num_rows: int, device: torch.device, dtype: torch.dtype) -> KVCache:
        c = self.cfg
        return KVCache.allocate(c.num_hidden_layers, num_rows, c.num_key_value_heads, c.num_code_groups,
                                c.head_dim, device, dtype)

    def forward(self, embeds: torch.Tensor, step: Step, cache: KVCache) -> torch.Tensor:
        """embeds: [B, T, talker_hidden] -> last hidden [B, hidden] (normed)."""
        return self.model(self.small_to_mtp_projection(embeds), step, cache)[:, -1]

    def frame_step(self, batch_size: int, cache: KVCache, device: torch.device, dtype: torch.dtype) -> Step:
        """RoPE and mask for all G positions of a frame, built once and windowed per step."""
        rows = torch.arange(batch_size, device=device)
        positions = torch.arange(self.cfg.num_code_groups, device=device).expand(batch_size, -1)  # [B, G]
        return Step.build(rows, positions, self.cfg.head_dim, self.cfg.rope_theta, cache, dtype)

    def generate(self, talker_hidden: torch.Tensor, code0_embed: torch.Tensor, cache: KVCache,
                 sampling: BatchSampling, noise: torch.Tensor | NoiseKeys) -> tuple[torch.Tensor, torch.Tensor]:
        """talker_hidden, code0_embed: [B, talker_hidden], noise: [B, G-1, vocab] Exp(1), or the fused frame's
        `NoiseKeys` (its `offset` the first step's first draw) -> (codes [B, G-1] int64, their talker-width
        embeddings [B, G-1, talker_hidden]).

        Batch row b uses cache row b (the cache is rewritten every frame). No host sync: the
        whole loop is one CUDA graph on the GPU path."""
        x = torch.stack((talker_hidden, code0_embed), dim=1)  # [B, 2, talker_hidden]
        frame = self.frame_step(x.shape[0], cache, x.device, x.dtype)
        codes, embeds = [], []
        for i, (head, table) in enumerate(zip(self.lm_head, self.model.codec_embedding)):
            step = frame.window(0, 2) if i == 0 else frame.window(i + 1, i + 2)
            code = self._draw(self._logits(x, step, cache, head), sampling, noise, i)  # [B]
            codes.append(code)
            embeds.append(table(code))
            x = embeds[-1][:, None]
        return torch.stack(codes, dim=1), torch.stack(embeds, dim=1)

    @property
    def is_fused(self) -> bool:
        """Whether the layers run as fused Triton matmuls (`DecoderStack.use_fused_kernels`): then the projection
        in front and the final norm behind them are fused matmuls too."""
        return self.model.layers[0].is_fused

    def _logits(self, x: torch.Tensor, step: Step, cache: KVCache, head: nn.Linear) -> torch.Tensor:
        """x [B, T, talker_hidden] -> the step's head logits [B, vocab] float32 (at the last token)."""
        if not self.is_fused:
            return head(self(x, step, cache)).float()
        projection = self.small_to_mtp_projection
        if isinstance(projection, nn.Linear):
            x = fused_linear(x, projection.weight, bias=projection.bias)
        last = self.model.forward_layers(x, step, cache)[:, -1]
        norm = self.model.norm
        return fused_linear(last, head.weight, norm.weight, norm.eps, out_dtype=torch.float32)

    def _draw(self, logits: torch.Tensor, sampling: BatchSampling, noise: torch.Tensor | NoiseKeys,
              i: int) -> torch.Tensor:
        """Step i's codes [B] from its logits [B, vocab]: the fused sampler on NoiseKeys, else `sample`."""
        if isinstance(noise, NoiseKeys):
            return fused_sample(logits, sampling, noise_keys=noise.keys, noise_offset=noise.offset + i * logits.shape[1])
        return self.sample(logits, sampling, noise[:, i])
