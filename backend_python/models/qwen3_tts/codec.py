"""Qwen3-TTS 12 Hz codec decoder: 16 codebooks at 12.5 frames/s -> 24 kHz mono.

Our own implementation of the reference `Qwen3TTSTokenizerV2Decoder` (qwen-tts
0.1.1). Parameters carry the official `speech_tokenizer/model.safetensors`
names (`decoder.*`), so a real checkpoint loads directly; `encoder.*` keys are
ignored. The decoder is strictly causal (left-padded convs, transposed convs
trimmed on the right, a causal sliding-window transformer), so right-padding
windows in `Codec.decode_windows` is exact. It is stateless and not exactly
streamable: every frame sees up to num_hidden_layers * (sliding_window - 1)
frames back, so a window with `left_context_frames` of context approximates a
full decode (the error is pinned by tests/unit/test_qwen3_tts_codec.py).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields, replace

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from backend_python.models.base import Codec
from backend_python.models.qwen3_tts.codec_layers import CodecDecoder

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
MODEL_TYPE = "qwen3_tts_tokenizer_12hz"


@dataclass(frozen=True)
class Qwen3TTSCodecConfig:
    """The official `decoder_config` fields we use, plus our serving setting `left_context_frames`."""

    codebook_dim: int  # no default upstream; 512 for the real model
    codebook_size: int = 2048
    num_quantizers: int = 16
    latent_dim: int = 1024
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 8
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int | None = None  # None: hidden_size // num_attention_heads (as upstream)
    attention_bias: bool = False
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8000
    sliding_window: int = 72
    layer_scale_initial_scale: float = 0.01
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    upsampling_ratios: tuple[int, ...] = (2, 2)
    decoder_dim: int = 1536
    sample_rate: int = 24000  # top-level `output_sample_rate` upstream
    left_context_frames: int = 25  # frames of context per window (upstream chunked_decode uses 25)

    def __post_init__(self) -> None:
        object.__setattr__(self, "upsample_rates", tuple(self.upsample_rates))
        object.__setattr__(self, "upsampling_ratios", tuple(self.upsampling_ratios))
        if self.hidden_act != "silu":
            raise ValueError(f"only hidden_act='silu' is implemented, got {self.hidden_act!r}")
        if self.num_quantizers < 2:
            raise ValueError("num_quantizers must be >= 2 (one semantic codebook plus acoustic ones)")
        if self.codebook_dim % 2 or self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("codebook_dim must be even and heads a multiple of KV heads")
        if self.decoder_dim % 2 ** len(self.upsample_rates):
            raise ValueError("decoder_dim must halve cleanly once per upsample rate")
        if self.left_context_frames < 0:
            raise ValueError(f"left_context_frames must be >= 0, got {self.left_context_frames}")

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.upsample_rates) * math.prod(self.upsampling_ratios)

    @classmethod
    def from_official(cls, config: dict) -> Qwen3TTSCodecConfig:
        """From a speech tokenizer `config.json` (top level); unknown keys are ignored."""
        decoder = config["decoder_config"]
        rope_scaling = decoder.get("rope_scaling")
        if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) != "default":
            raise ValueError(f"unsupported rope_scaling {rope_scaling}")
        known = {f.name for f in fields(cls)} - {"sample_rate"}
        cfg = cls(**{k: v for k, v in decoder.items() if k in known},
                  sample_rate=config.get("output_sample_rate", 24000))
        upsample = config.get("decode_upsample_rate", cfg.samples_per_frame)
        if upsample != cfg.samples_per_frame:
            raise ValueError(f"decode_upsample_rate {upsample} != product of rates {cfg.samples_per_frame}")
        return cfg

    def to_official(self) -> dict:
        """The speech tokenizer `config.json` shape (decoder only; no `encoder_config`)."""
        decoder = {k: v for k, v in asdict(self).items() if k not in ("sample_rate", "left_context_frames")}
        if self.head_dim is None:
            del decoder["head_dim"]
        decoder.update(upsample_rates=list(self.upsample_rates), upsampling_ratios=list(self.upsampling_ratios))
        return {"architectures": ["Qwen3TTSTokenizerV2Model"], "model_type": MODEL_TYPE,
                "decoder_config": decoder, "encoder_valid_num_quantizers": self.num_quantizers,
                "input_sample_rate": self.sample_rate, "output_sample_rate": self.sample_rate,
                "decode_upsample_rate": self.samples_per_frame,
                "encode_downsample_rate": self.samples_per_frame}


def tiny_codec_config() -> Qwen3TTSCodecConfig:
    """A ~0.1 M-parameter decoder with the real topology (tiny_build.py's decoder_config)."""
    return Qwen3TTSCodecConfig(codebook_size=64, codebook_dim=16, hidden_size=32, latent_dim=32, head_dim=8,
                               num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
                               num_hidden_layers=2, sliding_window=72, decoder_dim=64)


def full_codec_config() -> Qwen3TTSCodecConfig:
    """The shape of the released Qwen3-TTS-Tokenizer-12Hz decoder (~114 M parameters)."""
    return Qwen3TTSCodecConfig(codebook_size=2048, codebook_dim=512, latent_dim=1024, hidden_size=512,
                               intermediate_size=1024, num_hidden_layers=8, num_attention_heads=16,
                               num_key_value_heads=16, head_dim=64, decoder_dim=1536)


class Qwen3TTSCodec(Codec):
    """The Qwen3-TTS 12 Hz codec decoder behind the `Codec` interface."""

    supports_cuda_graphs = True  # shape checks only on the host; masks and positions built on the device

    def __init__(self, cfg: Qwen3TTSCodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.decoder = CodecDecoder(cfg)

    @property
    def num_codebooks(self) -> int:
        return self.cfg.num_quantizers

    @property
    def codebook_size(self) -> int:
        return self.cfg.codebook_size

    @property
    def sample_rate(self) -> int:
        return self.cfg.sample_rate

    @property
    def samples_per_frame(self) -> int:
        return self.cfg.samples_per_frame

    @property
    def left_context_frames(self) -> int:
        return self.cfg.left_context_frames

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, T, K] int64 in [0, codebook_size) -> audio: [B, T * 1920] float32 in [-1, 1]."""
        if codes.dim() != 3 or codes.shape[-1] != self.num_codebooks:
            raise ValueError(f"codes must be [B, T, {self.num_codebooks}], got {tuple(codes.shape)}")
        return self.decoder(codes).float().clamp(-1.0, 1.0)

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
        with torch.device("meta"):
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


def build_tiny_codec_checkpoint(out_dir: str | os.PathLike, seed: int = 0) -> Qwen3TTSCodec:
    """Write a deterministic random tiny codec (config.json + model.safetensors) into `out_dir`."""
    codec = Qwen3TTSCodec.from_config(tiny_codec_config(), seed=seed)
    codec.save_pretrained(out_dir)
    return codec
