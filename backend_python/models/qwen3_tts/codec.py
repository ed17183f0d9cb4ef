"""Qwen3-TTS 12 Hz codec decoder: 16 codebooks at 12.5 frames/s -> 24 kHz mono.

Our own implementation of the reference `Qwen3TTSTokenizerV2Decoder` (qwen-tts
0.1.1). Parameters carry the official `speech_tokenizer/model.safetensors`
names (`decoder.*`), so a real checkpoint loads directly; `encoder.*` keys are
ignored. The decoder is strictly causal (left-padded convs, transposed convs
trimmed on the right, a causal sliding-window transformer), so right-padding
windows in `Codec.decode_windows` is exact. A window is not exact: every frame
sees up to num_hidden_layers * (sliding_window - 1) frames back, so a window
with `left_context_frames` of context approximates a full decode (the error is
pinned by tests/unit/test_qwen3_tts_codec.py). `decode_stream` is exact: it
carries each layer's tail (models/codec_stream.py) and decodes only new frames
(the error against a full decode is pinned by tests/unit/test_codec_stream.py).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import replace

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from backend_python.models.base import Codec, CodecShape
from backend_python.models.checkpoint_io import CONFIG_FILE, WEIGHTS_FILE
from backend_python.models.codec_stream import CodecStreamState, StreamCarry
from backend_python.models.layers.empty_weights import empty_weights
from backend_python.models.qwen3_tts.codec_config import Qwen3TTSCodecConfig, tiny_codec_config
from backend_python.models.qwen3_tts.codec_layers import CodecDecoder


class Qwen3TTSCodec(Codec):
    """The Qwen3-TTS 12 Hz codec decoder behind the `Codec` interface."""

    supports_cuda_graphs = True  # shape checks only on the host; masks and positions built on the device
    supports_streaming_state = True  # strictly causal: carried tails make chunked decode exact

    def __init__(self, cfg: Qwen3TTSCodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.shape = CodecShape(cfg.num_quantizers, cfg.codebook_size, cfg.sample_rate, cfg.samples_per_frame,
                                cfg.left_context_frames)
        self.decoder = CodecDecoder(cfg)

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, T, K] int64 in [0, codebook_size) -> audio: [B, T * 1920] float32 in [-1, 1]."""
        if codes.dim() != 3 or codes.shape[-1] != self.num_codebooks:
            raise ValueError(f"codes must be [B, T, {self.num_codebooks}], got {tuple(codes.shape)}")
        return self.decoder(codes).float().clamp(-1.0, 1.0)

    def new_stream_state(self) -> CodecStreamState:
        """Zero tails in the weights' dtype: ~2.6 MB per stream for the full decoder in bf16."""
        weight = self.decoder.pre_conv.conv.weight
        return self.decoder.new_stream_state(weight.dtype, weight.device)

    @torch.inference_mode()
    def decode_with_carry(self, codes: torch.Tensor, carry: StreamCarry) -> torch.Tensor:
        """codes: [B, T, K] int64 (right-padded) -> audio [B, T * 1920] float32, tails through `carry`."""
        if codes.dim() != 3 or codes.shape[-1] != self.num_codebooks:
            raise ValueError(f"codes must be [B, T, {self.num_codebooks}], got {tuple(codes.shape)}")
        return self.decoder(codes, carry).float().clamp(-1.0, 1.0)

    # ------------------------------------------------------------ construction

    @classmethod
    def from_config(cls, cfg: Qwen3TTSCodecConfig, device: torch.device | str = "cpu",
                    dtype: torch.dtype = torch.float32, seed: int = 0) -> Qwen3TTSCodec:
        """Random weights, deterministic in `seed`; every parameter is randomised so codes matter."""
        model = cls(cfg)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(random_parameter(name, param, generator))
        return model.to(device=device, dtype=dtype).eval()

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, device: torch.device | str = "cpu",
                        dtype: torch.dtype = torch.float32,
                        left_context_frames: int | None = None) -> Qwen3TTSCodec:
        """Load a speech tokenizer folder (config.json + model.safetensors); strict on `decoder.*`."""
        with open(os.path.join(path, CONFIG_FILE)) as f:
            cfg = Qwen3TTSCodecConfig.from_official(json.load(f))
        if left_context_frames is not None:
            cfg = replace(cfg, left_context_frames=left_context_frames)
        with empty_weights():
            model = cls(cfg)
        state = read_decoder_weights(os.path.join(path, WEIGHTS_FILE), device, dtype)
        model.load_state_dict(state, strict=True, assign=True)
        return model.eval()

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write config.json (official shape) and model.safetensors (`decoder.*` keys, as stored)."""
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, CONFIG_FILE), "w") as f:
            json.dump(self.cfg.to_official(), f, indent=2)
        state = {k: v.detach().to("cpu").contiguous() for k, v in self.state_dict().items()}
        save_file(state, os.path.join(path, WEIGHTS_FILE), metadata={"format": "pt"})


def read_decoder_weights(file: str, device: torch.device | str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The `decoder.*` tensors of a safetensors file, cast to `dtype` on `device`."""
    with safe_open(file, framework="pt", device="cpu") as f:
        return {k: f.get_tensor(k).to(device=device, dtype=dtype) for k in f.keys() if k.startswith("decoder.")}


def random_parameter(name: str, param: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A random value for one parameter, scaled so a random decoder neither vanishes nor saturates."""
    leaf = name.rsplit(".", 1)[-1]
    shape = param.shape
    if leaf == "embedding_sum":
        return torch.randn(shape, generator=generator)
    if leaf == "cluster_usage":
        return 0.5 + torch.rand(shape, generator=generator)  # [0.5, 1.5): exercises the division
    if leaf in ("alpha", "beta"):  # SnakeBeta log-scales
        return 0.2 * torch.randn(shape, generator=generator)
    if leaf in ("scale", "gamma"):  # LayerScale / ConvNeXt residual scales
        return 0.1 + 0.2 * torch.rand(shape, generator=generator)
    if "norm" in name and leaf == "weight":
        return 1.0 + 0.1 * torch.randn(shape, generator=generator)
    if leaf == "bias":
        return 0.02 * torch.randn(shape, generator=generator)
    fan_in = param[0].numel() if param.dim() > 1 else shape[0]
    gain = 0.3 if ".conv2." in name else 1.0  # keep residual units from compounding the level
    gain = 0.4 if shape[0] == 1 else gain  # the 1-channel output conv: keep most samples unclipped
    return gain * torch.randn(shape, generator=generator) / math.sqrt(fan_in)


def build_tiny_codec_checkpoint(out_dir: str | os.PathLike, seed: int = 0,
                                cfg: Qwen3TTSCodecConfig | None = None) -> Qwen3TTSCodec:
    """Write a deterministic random tiny codec (config.json + model.safetensors) into `out_dir`; `cfg`: another
    shape than the tiny preset's (the test fixtures keep the real 16 codebooks: `codec_config.FIXTURE_SHAPE`)."""
    codec = Qwen3TTSCodec.from_config(cfg or tiny_codec_config(), seed=seed)
    codec.save_pretrained(out_dir)
    return codec
