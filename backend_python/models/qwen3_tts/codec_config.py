"""The Qwen3-TTS 12 Hz codec decoder's config (the official `decoder_config`) and its named shapes."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

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


# The tiny codec of tests/fixtures (goldens from the reference package): the real 16 codebooks, a 64-wide decoder
FIXTURE_SHAPE = {"num_quantizers": 16, "decoder_dim": 64}


def tiny_codec_config(num_quantizers: int = 4, decoder_dim: int = 32) -> Qwen3TTSCodecConfig:
    """A ~0.1 M-parameter decoder of the real topology over 4 codebooks (the tiny talker's). 32 wide: its
    upsampling stages at up to 24 kHz (Snake activations and convolutions, channels halving per stage) were most of
    a tiny chunk's decode, and 64 wide cost 1.6-2x as much."""
    return Qwen3TTSCodecConfig(codebook_size=64, codebook_dim=16, num_quantizers=num_quantizers, hidden_size=32,
                               latent_dim=32, head_dim=8, num_attention_heads=4, num_key_value_heads=4,
                               intermediate_size=64, num_hidden_layers=2, sliding_window=72, decoder_dim=decoder_dim)


def full_codec_config() -> Qwen3TTSCodecConfig:
    """The shape of the released Qwen3-TTS-Tokenizer-12Hz decoder (~114 M parameters)."""
    return Qwen3TTSCodecConfig(codebook_size=2048, codebook_dim=512, latent_dim=1024, hidden_size=512,
                               intermediate_size=1024, num_hidden_layers=8, num_attention_heads=16,
                               num_key_value_heads=16, head_dim=64, decoder_dim=1536)
