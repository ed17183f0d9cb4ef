"""`FlashTTSCodecConfig`: the token-to-mel DiT's and the vocoder's shapes, and how the codec is served.

config.json of a codec folder: {"flow": MeanFlowConfig fields, "vocoder": HiFiGANConfig fields, then the serving
fields below}. A frame is one speech token (K = 1, 25 per second, 960 samples at 24 kHz).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from protocol.settings import read_settings

from ..base import CodecWindowing
from .meanflow import MeanFlowConfig
from .vocoder import HiFiGANConfig

SPEECH_CODES = 6561  # CosyVoice 2's speech tokenizer (S3 v2); the LM adds 3 stop tokens, the DiT one filler row


@dataclass(frozen=True)
class FlashTTSCodecConfig:
    """Defaults: FlashTTS's published shape (`full()`), served as its streaming path runs it (1 evaluation)."""

    flow: MeanFlowConfig = field(default_factory=MeanFlowConfig)
    vocoder: HiFiGANConfig = field(default_factory=HiFiGANConfig)
    codebook_size: int = SPEECH_CODES
    # function evaluations of the sampler, 1 or 2: FlashTTS's streaming token2wav runs 1 (its yaml and README say
    # 2); one evaluation's reach is 1 block ahead, which the 6-token lookahead covers exactly, 2 reach 2 blocks
    n_evals: int = 1
    noise_seed: int = 0  # the fixed noise x at t = 1 (same codes and condition -> same audio)
    # tokens of fixed noise, indexed by stream position (300 s, as CosyVoice's; a longer stream wraps around)
    noise_tokens: int = 7500
    # windows (frames = tokens), measured in tests/unit/test_flashtts.py: 18 tokens of left context (3 blocks: one
    # evaluation's whole reach back, so the new tokens' mel is exact; 24 also make the vocoder's first samples
    # exact, 1e-6 against 8e-5, far below the chunk end's error), FlashTTS's 6 tokens of lookahead, and no overlap:
    # the audio past a chunk is decoded from the lookahead block, whose own next block is missing, so cross-fading
    # it in moves the chunk end's error into the next chunk's start
    left_context_frames: int = 18
    lookahead_frames: int = 6
    overlap_frames: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.flow, dict):
            object.__setattr__(self, "flow", MeanFlowConfig.from_dict(self.flow))
        if isinstance(self.vocoder, dict):
            object.__setattr__(self, "vocoder", HiFiGANConfig.from_dict(self.vocoder))
        if self.flow.mel_dim != self.vocoder.num_mels:
            raise ValueError(f"the DiT's mel_dim {self.flow.mel_dim} != the vocoder's num_mels {self.vocoder.num_mels}")
        if not 0 < self.codebook_size <= self.flow.text_num_embeds + 1:
            raise ValueError(f"codebook_size {self.codebook_size} exceeds the DiT's token embeddings")
        if self.n_evals < 1:
            raise ValueError(f"n_evals must be >= 1, got {self.n_evals}")
        if self.noise_tokens < 1:
            raise ValueError(f"noise_tokens must be >= 1, got {self.noise_tokens}")
        self.windowing()  # validates the three window fields

    @property
    def sample_rate(self) -> int:
        return self.vocoder.sampling_rate

    @property
    def samples_per_frame(self) -> int:
        return self.flow.mel_per_token * self.vocoder.hop_length

    def windowing(self) -> CodecWindowing:
        return CodecWindowing(self.left_context_frames, self.lookahead_frames, self.overlap_frames)

    @classmethod
    def full(cls, **overrides) -> "FlashTTSCodecConfig":
        """FlashTTS: DiT 16 x 768 (16 heads of 64, ff x2, token embeddings 512 wide), HiFi-GAN 24 kHz."""
        return cls(**overrides)

    @classmethod
    def tiny(cls, **overrides) -> "FlashTTSCodecConfig":
        """A DiT 4 x 64 with FlashTTS's block reach (layer 0 sees the next block, layers 1-3 the previous one:
        3 blocks back, 1 ahead, as layers 0 / 5, 10, 15 of the full 16) and a 32-channel HiFi-GAN with the same
        rates; the real condition widths and vocabulary."""
        flow = MeanFlowConfig(dim=64, depth=4, heads=2, dim_head=32, ff_mult=2, text_dim=32,
                              forward_layers=(0,), backward_layers=(1, 2, 3))
        return cls(flow=flow, vocoder=replace(HiFiGANConfig(), upsample_initial_channel=32), **overrides)

    @classmethod
    def from_dict(cls, d: dict) -> "FlashTTSCodecConfig":
        return read_settings(cls, d, ignore_unknown=True)

    def to_dict(self) -> dict:
        serving = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("flow", "vocoder")}
        return {"flow": self.flow.to_dict(), "vocoder": self.vocoder.to_dict(), **serving}
