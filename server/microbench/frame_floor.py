"""The bandwidth floor of one Qwen3-TTS LM frame: the bytes it must read from GPU memory / the copy bandwidth.

A frame is one talker step and G-1 code-predictor steps (G codebooks). What it reads:
- weights: the talker's decoder layers, final norm and codec head once; the predictor's input projection,
  layers and final norm once per step (15 times: one step's weights, 0.16 GB in bf16 for the 1.7B model,
  are nearly three times the H200's 60 MB of L2, so nothing keeps them on chip between steps), and each
  step's own lm head once. `is_predictor_cached` gives the other bound, the predictor's weights read once
  a frame: no bf16 kernel on one H200 reaches it (they exceed its L2, shared memory and registers
  together), but it says how much of the floor the 14 re-reads are;
- per batch row: the talker's keys and values over the row's context, the predictor's keys and values
  over its 16-position frame (2 + 3 + ... + 16 positions over the 15 steps), one embedding row per
  codebook (talker width) and the frame's Exp(1) sampling noise (float32, drawn before the graphs run).
Not counted (each under 0.1 % of the total): logits, hidden states, and every write.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

BANDWIDTH_BYTES_PER_S = 4.3e12  # the H200's measured device-to-device copy bandwidth
NOISE_BYTES = 4  # float32 Exp(1) noise, one value per vocabulary entry of every sampled codebook


@dataclass(frozen=True)
class FrameBytes:
    """What one frame reads, by source, in bytes; `per_row` terms are multiplied by the batch."""

    talker_weights: int  # decoder layers, final norm, codec head (the embedding tables are rows, below)
    predictor_step_weights: int  # input projection, decoder layers, final norm: read by every step
    predictor_heads: int  # the G-1 lm heads together (step i reads head i)
    num_predictor_steps: int  # G-1
    talker_kv_per_position: int  # keys and values of every talker layer at one position
    predictor_kv_per_row: int  # keys and values a row's G-1 predictor steps attend over
    embedding_rows_per_row: int  # G embedding rows of talker width
    noise_per_row: int  # the frame's sampling noise of one row

    def weights(self, is_predictor_cached: bool = False) -> int:
        steps = 1 if is_predictor_cached else self.num_predictor_steps
        return self.talker_weights + steps * self.predictor_step_weights + self.predictor_heads

    def per_row(self, context: int) -> int:
        """A batch row's bytes at `context` talker positions (the keys its talker step attends over)."""
        return (context * self.talker_kv_per_position + self.predictor_kv_per_row + self.embedding_rows_per_row
                + self.noise_per_row)

    def total(self, batch: int, context: int, is_predictor_cached: bool = False) -> int:
        return self.weights(is_predictor_cached) + batch * self.per_row(context)


def predictor_keys_per_frame(num_codebooks: int) -> int:
    """Key positions the G-1 predictor steps attend over together: step 0 writes positions 0 and 1 (the
    talker's hidden state, codebook 0) and reads both; step i >= 1 reads positions 0 .. i + 1."""
    return 2 + sum(i + 2 for i in range(1, num_codebooks - 1))


def kv_bytes_per_position(num_layers: int, num_kv_heads: int, head_dim: int, element_size: int) -> int:
    return 2 * num_layers * num_kv_heads * head_dim * element_size


def parameter_bytes(*modules: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for module in modules for p in module.parameters())


def frame_bytes(talker: nn.Module, noise_width: int) -> FrameBytes:
    """Read off a Qwen3-TTS `Talker` (any device, `meta` too): its parameters and its config's shapes."""
    cfg, predictor = talker.cfg, talker.code_predictor
    pcfg, size = predictor.cfg, talker.codec_head.weight.element_size()
    return FrameBytes(
        talker_weights=parameter_bytes(talker.model.layers, talker.model.norm, talker.codec_head),
        predictor_step_weights=parameter_bytes(predictor.small_to_mtp_projection, predictor.model.layers,
                                               predictor.model.norm),
        predictor_heads=parameter_bytes(predictor.lm_head),
        num_predictor_steps=cfg.num_code_groups - 1,
        talker_kv_per_position=kv_bytes_per_position(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim,
                                                     size),
        predictor_kv_per_row=predictor_keys_per_frame(cfg.num_code_groups) * kv_bytes_per_position(
            pcfg.num_hidden_layers, pcfg.num_key_value_heads, pcfg.head_dim, size),
        embedding_rows_per_row=cfg.num_code_groups * cfg.hidden_size * size,
        noise_per_row=noise_width * NOISE_BYTES)


def floor_report(frame: FrameBytes, batch: int, context: int,
                 bandwidth: float = BANDWIDTH_BYTES_PER_S) -> dict:
    """The floor of one frame at `batch` rows of `context` talker positions each, both predictor bounds."""
    weights, cached = frame.weights(), frame.weights(is_predictor_cached=True)
    rows = batch * frame.per_row(context)
    return {"batch": batch, "context": context, "bandwidth_bytes_per_s": bandwidth,
            "talker_weight_bytes": frame.talker_weights,
            "predictor_weight_bytes": weights - frame.talker_weights,
            "predictor_weight_bytes_cached": cached - frame.talker_weights,
            "row_bytes": rows, "talker_kv_bytes": batch * context * frame.talker_kv_per_position,
            "floor_ms": (weights + rows) / bandwidth * 1e3,
            "floor_ms_predictor_cached": (cached + rows) / bandwidth * 1e3}
