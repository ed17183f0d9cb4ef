"""The Higgs audio tokenizer's decoder as our `Codec`: 8 codebooks at 25 frames/s -> 24 kHz mono, 960 samples per
frame (`HiggsAudioTokenizer.decode`).

codes -> RVQ decode (each codebook's `_codebook.embed` row through its `project_out`, summed: the quantized
latent of acoustic + semantic channels) -> `fc_post2` (to the acoustic latent D) -> DAC decoder. The decoder
is transformers' `DacDecoder` adjusted as its xcodec port adjusts it for this codec (output padding
stride % 2 on each transposed conv, no final tanh). The semantic branch's decoder only serves training: the
reference's `decode` does not run it, nor do we.

The DAC decoder is not causal (centred convolutions), so a window needs frames on both sides: its receptive
field is about 10 frames each way (the first conv ±3, the 200 Hz residual units ±5, the rest ±2).
`LEFT_CONTEXT_FRAMES` and `LOOKAHEAD_FRAMES` hold a chunk's new samples within the tolerance
tests/unit/test_higgs_v3_codec.py pins; windows of different lengths are never padded into one batch.
"""
from __future__ import annotations

import torch
from torch import nn

from ..base import Codec, CodecShape, CodecWindowing
from ..optional_imports import hide_unimportable_optional_packages
from .checkpoint import codec_names, read_tokenizer_state
from .config import AudioTokenizerConfig

LEFT_CONTEXT_FRAMES = 12
LOOKAHEAD_FRAMES = 10
WINDOWING = CodecWindowing(LEFT_CONTEXT_FRAMES, LOOKAHEAD_FRAMES)
TARGET_STD = 0.1  # the level random weights are scaled to, so their waveform stays inside [-1, 1]


class Codebook(nn.Module):
    """`_codebook`: the code vectors (`embed` [bins, codebook_dim], a buffer as in the reference)."""

    def __init__(self, bins: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("embed", torch.zeros(bins, dim))


class VectorQuantizer(nn.Module):
    """One RVQ layer: `project_in` (encoder side) and `project_out` exist where codebook_dim != the latent's."""

    def __init__(self, dim: int, bins: int, codebook_dim: int) -> None:
        super().__init__()
        projects = codebook_dim != dim
        self.project_in = nn.Linear(dim, codebook_dim) if projects else nn.Identity()
        self.project_out = nn.Linear(codebook_dim, dim) if projects else nn.Identity()
        self._codebook = Codebook(bins, codebook_dim)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T] -> [B, T, dim]."""
        return self.project_out(nn.functional.embedding(codes, self._codebook.embed))


class ResidualQuantizer(nn.Module):
    """`quantizer.vq.layers.*`."""

    def __init__(self, cfg: AudioTokenizerConfig) -> None:
        super().__init__()
        self.vq = nn.Module()
        self.vq.layers = nn.ModuleList(VectorQuantizer(cfg.quantizer_dim, cfg.bins, cfg.codebook_dim)
                                       for _ in range(cfg.n_q))

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T, K] -> the quantized latent [B, T, quantizer_dim]: the layers' vectors summed."""
        return sum(layer.decode(codes[..., i]) for i, layer in enumerate(self.vq.layers))


def dac_config(cfg: AudioTokenizerConfig):
    """transformers' `DacConfig` of the tokenizer's `dac2.Encoder(64, ratios, D)` and `dac2.Decoder(D, 1024, ratios)`
    (both run through `ratios` in the same order)."""
    hide_unimportable_optional_packages()  # before transformers' modeling code loads (a scipy built for numpy 2)
    from transformers import DacConfig

    return DacConfig(hidden_size=cfg.D, encoder_hidden_size=cfg.encoder_dim, decoder_hidden_size=cfg.decoder_dim,
                     upsampling_ratios=list(cfg.ratios), downsampling_ratios=list(cfg.ratios),
                     sampling_rate=cfg.sample_rate)


def dac_decoder(cfg: AudioTokenizerConfig) -> nn.Module:
    """transformers' `DacDecoder` shaped and adjusted as the Higgs tokenizer's decoder."""
    hide_unimportable_optional_packages()
    from transformers.models.dac.modeling_dac import DacDecoder

    decoder = DacDecoder(dac_config(cfg))
    for module in decoder.modules():
        if isinstance(module, nn.ConvTranspose1d):
            module.output_padding = (module.stride[0] % 2,)
    decoder.tanh = nn.Identity()
    return decoder


class HiggsTokenizerCodec(Codec):
    """Parameters carry the official tokenizer's names (`quantizer`, `fc_post2`; `decoder_2` is renamed,
    checkpoint.py)."""

    def __init__(self, cfg: AudioTokenizerConfig, windowing: CodecWindowing = WINDOWING) -> None:
        super().__init__()
        self.config = cfg
        self.shape = CodecShape(cfg.n_q, cfg.bins, cfg.sample_rate, cfg.hop_length, windowing.left_context_frames,
                                windowing.lookahead_frames)
        self.quantizer = ResidualQuantizer(cfg)
        self.fc_post2 = nn.Linear(cfg.quantizer_dim, cfg.D)
        self.decoder_2 = dac_decoder(cfg)

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, T, K] int64 in [0, bins) -> audio: [B, T * hop] float32 in [-1, 1]."""
        return self.decode_raw(codes).float().clamp(-1.0, 1.0)

    def decode_raw(self, codes: torch.Tensor) -> torch.Tensor:
        """The decoder's output [B, T * hop], unclamped (as the reference's `decode`)."""
        if codes.dim() != 3 or codes.shape[-1] != self.num_codebooks:
            raise ValueError(f"codes must be [B, T, {self.num_codebooks}], got {tuple(codes.shape)}")
        latent = self.fc_post2(self.quantizer.decode(codes))  # [B, T, D]
        dtype = self.fc_post2.weight.dtype
        return self.decoder_2(latent.transpose(1, 2).to(dtype))[:, 0]

    def decode_windows(self, windows: list[tuple[torch.Tensor, int]], conditions=None) -> list[torch.Tensor]:
        """As `Codec.decode_windows`, but one batch per window length: padding would reach a window's last
        samples through the non-causal decoder."""
        self.check_conditions(windows, conditions)
        out: list[torch.Tensor | None] = [None] * len(windows)
        spf = self.samples_per_frame
        for length in sorted({codes.shape[0] for codes, _ in windows}):
            group = [i for i, (codes, _) in enumerate(windows) if codes.shape[0] == length]
            audio = self.decode(torch.stack([windows[i][0] for i in group]))  # [G, length * spf]
            for row, i in enumerate(group):
                out[i] = audio[row, windows[i][1] * spf:]
        return out

    # ------------------------------------------------------------ construction

    @classmethod
    def from_pretrained(cls, path, cfg: AudioTokenizerConfig, device="cpu",
                        dtype: torch.dtype = torch.float32) -> "HiggsTokenizerCodec":
        """The `audio_tokenizer/` of a checkpoint dir; every decoder tensor must be there."""
        codec = cls(cfg)
        state = codec_names(read_tokenizer_state(path), len(cfg.ratios))
        codec.load_codec_state(state)
        return codec.to(device=device, dtype=dtype).eval()

    def load_codec_state(self, state: dict[str, torch.Tensor]) -> None:
        """Our-named codec tensors; the encoder's (project_in) may be absent, nothing else may."""
        missing, _ = self.load_state_dict(state, strict=False)
        missing = [k for k in missing if ".project_in." not in k]
        if missing:
            raise ValueError(f"audio tokenizer weights missing: {missing[:5]} ({len(missing)} in all)")

    @classmethod
    def from_config(cls, cfg: AudioTokenizerConfig, device="cpu", dtype: torch.dtype = torch.float32,
                    seed: int = 0) -> "HiggsTokenizerCodec":
        """Random weights, deterministic in `seed`: N(0, 1/fan_in) convs and linears, unit snakes, random
        codebooks, and the last conv scaled so random codes decode at about TARGET_STD."""
        codec = cls(cfg)
        randomise(codec, torch.Generator().manual_seed(seed))
        return codec.to(device=device, dtype=dtype).eval()


@torch.no_grad()
def randomise(codec: HiggsTokenizerCodec, generator: torch.Generator) -> None:
    for module in codec.modules():
        if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d, nn.Linear)):
            fan_in = module.weight[0].numel() if not isinstance(module, nn.ConvTranspose1d) else \
                module.weight.shape[0] * module.weight.shape[2] // max(module.stride[0], 1)
            module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * fan_in ** -0.5)
            if module.bias is not None:
                module.bias.zero_()
        if isinstance(module, Codebook):
            module.embed.copy_(torch.randn(module.embed.shape, generator=generator))
    codes = torch.randint(0, codec.codebook_size, (1, 8, codec.num_codebooks), generator=generator)
    gain = TARGET_STD / max(codec.decode_raw(codes).std().item(), 1e-6)
    codec.decoder_2.conv2.weight.mul_(gain)
