"""DualCodec's encoder (the 12.5 Hz `12hz_v1`): 24 kHz reference audio -> TontaubeV1's codes, for voice cloning.

The reference (craitech/tontaube `app/utils.py`) calls `dualcodec.Inference.encode(wav [1, 1, T], n_quantizers=4)`,
which chains (dualcodec 0.4.2, `infer/dualcodec/inference_with_semantic.py` and `model_codec/`):

1. The semantic features (`SemanticFeatures` here). The audio -> 16 kHz (`torchaudio.functional.resample`) ->
   `SeamlessM4TFeatureExtractor` (Kaldi fbank, 80 mel bins, 25 ms window, 10 ms hop, each bin normalised over the
   clip, frames padded to an even count and stacked in pairs: 160 values at 50 Hz, with an attention mask that
   hides a pair holding the padded frame) -> w2v-BERT 2.0 (`Wav2Vec2BertModel`), `hidden_states[17]` (the
   reference's `output_idx`, its `layer_idx` 15 + 2; index 0 is the conformer stack's input, so 17 is the output
   of the 17th of 24 layers: the 7 after it are never read, and are not kept here) -> (x - mean) / sqrt(var) with
   the checkpoint's `w2vbert2_mean_var_stats_emilia.pt` -> `avg_pool1d` by `semantic_downsample_factor` 4 (the
   remainder dropped): [B, F, 1024] at 12.5 Hz.
2. `DualCodec.encode(audio, num_quantizers=4, semantic_repr)` (`DualCodecEncoder.encode` here):
   `convnext_encoder` (a weight-normed 1x1 conv 1024 -> 768, then causal ConvNeXt blocks) -> `semantic_vq`, one
   DAC vector quantizer: its `in_proj` (1x1 conv to the 8-dim code space), the nearest codebook row after both are
   L2-normalised (the semantic code), the row back through `out_proj` -> `convnext_decoder` (the semantic latent,
   1,024 channels, as decoding has it); then DAC: the audio right-padded with zeros to whole 1,920-sample frames ->
   `dac.encoder` (a 7-tap conv, one block a rate (4, 5, 6, 8, 2): three residual units with dilations 1, 3, 9,
   Snake, a conv of kernel 2 * rate, stride rate, padding ceil(rate / 2), doubling the channels from 32 to 1,024;
   then Snake and a 3-tap conv to the 1,024-channel latent) -> its first F frames minus the semantic latent ->
   `dac.quantizer`'s first 3 levels (the same nearest-row search on the residual, each level's `out_proj`ed row
   taken off it): the 3 acoustic codes.

Lengths. T samples at 24 kHz resample to ceil(2T / 3) (torchaudio's rule), which make 1 + (n16 - 400) // 160 fbank
frames, ceil(/ 2) stacked frames and floor(/ 4) pooled ones: F = floor((T - 119) / 1920) (`semantic_frames`), i.e.
floor(T / 1920) when T mod 1920 >= 119, else one less (the fbank window's 25 ms and the stacking shave 119 samples);
a 60 s clip gives 749 frames. DAC's encoder gives ceil(T / 1920) frames, 1 or 2 more; the reference (which asserts
the two differ by at most 2) keeps its first F, so the codes are F frames: DAC's last 1-2 frames are dropped (the
audio under them still reaches the kept ones through DAC's non-causal convs), and decoding the codes gives
1920 F - 4 samples.

Matched exactly: `DualCodec.encode`'s codes, on float32 weights and features (the golden test). The arithmetic is
the reference's op for op, down to the straight-through `z_e + (z_q - z_e)`, which is not z_q to the last bit and
reaches the next level's residual (a rounding the golden test's margins cannot see: kept so that near-ties break
as the reference's do). Not matched: the reference resamples with torchaudio's windowed sinc; this project has no
torchaudio, so the audio is resampled with soxr ("HQ", as the project's reference audio elsewhere), then
zero-padded or cut to torchaudio's length (soxr gives round(2T / 3), torchaudio ceil(2T / 3)): the frame counts
are the reference's, the features differ by the two filters' difference. The reference also runs w2v-BERT and the
pooling under float16 autocast, and `DualCodec.encode` too by default (`autocast=True`); here both run in float32
unless asked (`autocast=True` on `SemanticFeatures` does the feature side's). Either difference can flip a code
whose two nearest codebook rows are about that close.

Parameters carry the reference's state-dict names (`encoder_state` picks them out of the official
`dualcodec_12hz_16384_4096.safetensors`): the encoder holds `convnext_encoder`, `semantic_vq` (with `in_proj`),
`convnext_decoder` (the semantic latent the acoustic residual is taken from), `dac.encoder` and `dac.quantizer`'s
first 3 levels (`in_proj`, `codebook`, `out_proj`). The building blocks are dualcodec.py's.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import nn

from .dualcodec import (LATENT_DIM, RESIDUAL_DILATIONS, ConvNeXtBlock, DualCodecConfig, ResidualUnit,
                        ResidualVectorQuantize, Snake1d, VectorQuantize, WNConv1d, tiny_config)

SAMPLE_RATE = 24000  # DualCodec's
SEMANTIC_RATE = 16000  # w2v-BERT 2.0's
FBANK_WINDOW, FBANK_HOP, FBANK_STRIDE = 400, 160, 2  # SeamlessM4TFeatureExtractor's, in 16 kHz samples and frames
W2V_BERT_LAYER = 17  # the reference's `output_idx`: hidden_states[17], the 17th conformer layer's output
SEMANTIC_DOWNSAMPLE = 4  # 12hz_v1's `semantic_downsample_factor`: w2v-BERT's 50 Hz -> 12.5 Hz
MAX_SEAM = 2  # frames DAC's encoding may exceed the semantic features by (the reference asserts it)


@dataclass(frozen=True)
class DualCodecEncoderConfig(DualCodecConfig):
    """`DualCodecConfig` with the DAC encoder's shape (the reference's `encoder_dim`, `encoder_rates`); its latent is
    LATENT_DIM (official: 32 * 2 ** 5 channels). The decoder fields stay, so one config builds both halves."""

    encoder_dim: int = 32
    encoder_rates: tuple[int, ...] = (4, 5, 6, 8, 2)

    def __post_init__(self) -> None:
        super().__post_init__()
        if math.prod(self.encoder_rates) != self.hop_length:
            raise ValueError(f"encoder_rates {self.encoder_rates} must downsample by the decoder's "
                             f"{self.hop_length} samples a frame")

    @property
    def encoder_dims(self) -> list[int]:
        """The channels after the first conv and after each block."""
        return [self.encoder_dim << i for i in range(len(self.encoder_rates) + 1)]


def full_encoder_config() -> DualCodecEncoderConfig:
    """The official `12hz_v1` (conf/model/dualcodec_12hz_16384_4096_8vq.yaml), encoding 3 acoustic levels."""
    return DualCodecEncoderConfig()


def tiny_encoder_config() -> DualCodecEncoderConfig:
    """`tiny_config()`'s decoder with a small encoder at the same hop (an odd rate among them, as the official 5)."""
    base = tiny_config()
    return DualCodecEncoderConfig(**{f.name: getattr(base, f.name) for f in fields(base)}, encoder_dim=1,
                                  encoder_rates=(15, 8, 16))


def resampled_length(samples: int) -> int:
    """The 16 kHz samples `samples` at 24 kHz resample to: torchaudio's ceil(new * length / orig) (it reduces the
    rates to 2 and 3; its float32 quotient is exact here below 2 ** 23 samples)."""
    return -(-samples * 2 // 3)


def semantic_frames(samples: int, downsample: int = SEMANTIC_DOWNSAMPLE) -> int:
    """The reference's semantic frames (so its codes' frames) for `samples` at 24 kHz: fbank frames of the 16 kHz
    audio, padded to an even count and stacked in pairs, pooled by `downsample` (the remainder dropped). At 4 this
    is max(0, (samples - 119) // 1920)."""
    n16 = resampled_length(samples)
    if n16 < FBANK_WINDOW:
        return 0
    fbank = 1 + (n16 - FBANK_WINDOW) // FBANK_HOP
    return -(-fbank // FBANK_STRIDE) // downsample


_ENCODE_SIDE = re.compile(r"convnext_encoder\.|convnext_decoder\.|dac\.encoder\."
                          r"|semantic_vq\.quantizers\.0\.(?:in_proj|codebook|out_proj)\."
                          r"|dac\.quantizer\.quantizers\.(\d+)\.(?:in_proj|codebook|out_proj)\.")


def encoder_state(state_dict: dict[str, torch.Tensor], n_acoustic: int = 3) -> dict[str, torch.Tensor]:
    """The reference `DualCodec` state dict's encode side, which `DualCodecEncoder` holds under the same names.

    Dropped: `dac.decoder` and the acoustic levels from `n_acoustic` on."""
    kept = {}
    for name, tensor in state_dict.items():
        match = _ENCODE_SIDE.match(name)
        if match and (match.group(1) is None or int(match.group(1)) < n_acoustic):
            kept[name] = tensor
    return kept


class EncoderBlock(nn.Module):
    """The three residual units at dim / 2 channels, Snake, then a conv of stride `rate` to `dim` channels."""

    def __init__(self, dim: int, rate: int) -> None:
        super().__init__()
        down = WNConv1d(dim // 2, dim, 2 * rate, stride=rate, padding=math.ceil(rate / 2))
        self.block = nn.Sequential(*(ResidualUnit(dim // 2, d) for d in RESIDUAL_DILATIONS), Snake1d(dim // 2), down)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class Encoder(nn.Module):
    """`dac.encoder`: audio [B, 1, hop * L] -> latent [B, 1024, L] (each block's conv: length / rate exactly, as the
    audio is padded to whole frames)."""

    def __init__(self, c: DualCodecEncoderConfig) -> None:
        super().__init__()
        dims = c.encoder_dims
        layers = [WNConv1d(1, dims[0], 7, padding=3)]
        layers += [EncoderBlock(dims[i + 1], rate) for i, rate in enumerate(c.encoder_rates)]
        layers += [Snake1d(dims[-1]), WNConv1d(dims[-1], LATENT_DIM, 3, padding=1)]
        self.block = nn.Sequential(*layers)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        return self.block(audio)


class EncodingVectorQuantize(VectorQuantize):
    """One RVQ level with its encode side: `in_proj` (1x1 conv to the code space) and the nearest-row search."""

    def __init__(self, dim: int, codebook_size: int, codebook_dim: int) -> None:
        super().__init__(dim, codebook_size, codebook_dim)
        self.in_proj = WNConv1d(dim, codebook_dim, 1)

    def quantize(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z [B, dim, T] -> (codes [B, T], the chosen rows through `out_proj` [B, dim, T]), as the reference's
        `VectorQuantize.forward` computes them: the squared distance of the L2-normalised projection to each
        L2-normalised row (|e|^2 - 2 e.c + |c|^2, its terms in its order), the first largest -distance; then the
        straight-through z_e + (z_q - z_e), which is not z_q to the last bit, through `out_proj`."""
        z_e = self.in_proj(z)
        encodings = nn.functional.normalize(z_e.transpose(1, 2).reshape(-1, z_e.shape[1]))
        codebook = nn.functional.normalize(self.codebook.weight)
        dist = (encodings.pow(2).sum(1, keepdim=True) - 2 * encodings @ codebook.t()
                + codebook.pow(2).sum(1, keepdim=True).t())
        codes = (-dist).max(1)[1].reshape(z_e.shape[0], -1)
        z_q = nn.functional.embedding(codes, self.codebook.weight).transpose(1, 2)
        return codes, self.out_proj(z_e + (z_q - z_e))


class EncodingResidualVectorQuantize(ResidualVectorQuantize):
    """dualcodec.py's `ResidualVectorQuantize` (decoding codes still works) with `in_proj`s and `encode`."""

    def __init__(self, dim: int, levels: int, codebook_size: int, codebook_dim: int) -> None:
        nn.Module.__init__(self)
        self.quantizers = nn.ModuleList(EncodingVectorQuantize(dim, codebook_size, codebook_dim)
                                        for _ in range(levels))

    def encode(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z [B, dim, T] -> (codes [B, levels, T], the quantized z [B, dim, T]): each level quantizes the residual
        the levels before it left."""
        residual, quantized, codes = z, 0, []
        for quantizer in self.quantizers:
            codes_i, z_q_i = quantizer.quantize(residual)
            quantized = quantized + z_q_i
            residual = residual - z_q_i
            codes.append(codes_i)
        return torch.stack(codes, dim=1), quantized


class DualCodecEncoder(nn.Module):
    """The encode side of the reference `DualCodec`, under its names (`convnext_encoder`, `semantic_vq`,
    `convnext_decoder`, `dac.encoder`, `dac.quantizer`)."""

    def __init__(self, config: DualCodecEncoderConfig) -> None:
        super().__init__()
        c = self.config = config
        self.convnext_encoder = nn.Sequential(WNConv1d(LATENT_DIM, c.convnext_dim, 1),
                                              *(ConvNeXtBlock(c.convnext_dim, c.is_causal)
                                                for _ in range(c.convnext_layers)))
        self.semantic_vq = EncodingResidualVectorQuantize(c.convnext_dim, 1, c.semantic_codebook_size,
                                                          c.semantic_codebook_dim)
        self.convnext_decoder = nn.Sequential(*(ConvNeXtBlock(c.convnext_dim, c.is_causal)
                                                for _ in range(c.convnext_layers)),
                                              WNConv1d(c.convnext_dim, LATENT_DIM, 1))
        self.dac = nn.Module()
        self.dac.encoder = Encoder(c)
        self.dac.quantizer = EncodingResidualVectorQuantize(LATENT_DIM, c.n_acoustic, c.codebook_size,
                                                            c.codebook_dim)

    @torch.inference_mode()
    def encode_with_latent(self, audio: torch.Tensor, semantic_features: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`encode`, and the quantized latent [B, 1024, F] (the semantic latent plus the acoustic levels' sum: what
        decoding the codes rebuilds, to float rounding)."""
        hop = self.config.hop_length
        if audio.dim() != 2 or semantic_features.dim() != 3 or semantic_features.shape[0] != audio.shape[0] \
                or semantic_features.shape[2] != LATENT_DIM:
            raise ValueError(f"want audio [B, T] and semantic features [B, F, {LATENT_DIM}], got "
                             f"{tuple(audio.shape)} and {tuple(semantic_features.shape)}")
        frames, acoustic_frames = semantic_features.shape[1], -(-audio.shape[1] // hop)
        if not 1 <= frames <= acoustic_frames <= frames + MAX_SEAM:
            raise ValueError(f"{frames} semantic frames do not fit {audio.shape[1]} samples ({acoustic_frames} "
                             f"frames of {hop}: the features must have 0 to {MAX_SEAM} fewer, and at least one)")
        semantic = self.convnext_encoder(semantic_features.transpose(1, 2))
        semantic_codes, semantic = self.semantic_vq.encode(semantic)
        semantic = self.convnext_decoder(semantic)
        padded = nn.functional.pad(audio[:, None], (0, acoustic_frames * hop - audio.shape[1]))
        z = self.dac.encoder(padded)[..., :frames] - semantic
        acoustic_codes, acoustic = self.dac.quantizer.encode(z)
        return semantic_codes[:, 0], acoustic_codes, acoustic + semantic

    def encode(self, audio: torch.Tensor, semantic_features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """audio [B, T] at 24 kHz in [-1, 1], semantic_features [B, F, 1024] (`SemanticFeatures` of that audio:
        F = semantic_frames(T), 1 or 2 fewer than DAC's ceil(T / 1920)) -> (semantic [B, F], acoustic [B, 3, F])
        int64 codes."""
        semantic, acoustic, _ = self.encode_with_latent(audio, semantic_features)
        return semantic, acoustic


class SemanticFeatures(nn.Module):
    """24 kHz audio -> the normalised, pooled w2v-BERT 2.0 features `DualCodecEncoder.encode` takes (module doc):
    transformers' `SeamlessM4TFeatureExtractor` and `Wav2Vec2BertModel` (its layers cut after `output_layer`), and
    the mean and std (sqrt of the stats' var) as buffers. The model's width must be 1,024, the ConvNeXt's input."""

    def __init__(self, model: nn.Module, feature_extractor, mean: torch.Tensor, std: torch.Tensor,
                 output_layer: int = W2V_BERT_LAYER, downsample: int = SEMANTIC_DOWNSAMPLE,
                 autocast: bool = False) -> None:
        super().__init__()
        if model.config.hidden_size != LATENT_DIM:
            raise ValueError(f"DualCodec's ConvNeXt takes {LATENT_DIM} channels; the model has "
                             f"{model.config.hidden_size}")
        if not 1 <= output_layer <= len(model.encoder.layers):
            raise ValueError(f"output_layer {output_layer} is not one of the model's {len(model.encoder.layers)}")
        if feature_extractor.sampling_rate != SEMANTIC_RATE or feature_extractor.stride != FBANK_STRIDE:
            raise ValueError("the feature extractor must be w2v-BERT 2.0's: 16 kHz, frames stacked in pairs")
        model.encoder.layers = model.encoder.layers[:output_layer]  # hidden_states[output_layer] is their output
        model.config.num_hidden_layers = output_layer
        self.model, self.feature_extractor = model.eval(), feature_extractor
        self.output_layer, self.downsample, self.autocast = output_layer, downsample, autocast
        self.register_buffer("mean", mean.detach().float().reshape(LATENT_DIM).clone())
        self.register_buffer("std", std.detach().float().reshape(LATENT_DIM).clone())

    @classmethod
    def from_pretrained(cls, w2v_bert_path, stats_path, device="cpu", dtype=torch.float32,
                        **kwargs) -> "SemanticFeatures":
        """w2v-BERT 2.0 (a `facebook/w2v-bert-2.0` folder: its first W2V_BERT_LAYER layers only) and DualCodec's
        `w2vbert2_mean_var_stats_emilia.pt` ({"mean": [1024], "var": [1024]})."""
        from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertModel  # heavy import, only when loading

        layer = kwargs.get("output_layer", W2V_BERT_LAYER)
        model = Wav2Vec2BertModel.from_pretrained(w2v_bert_path, num_hidden_layers=layer, dtype=dtype)
        stats = torch.load(stats_path, map_location="cpu")
        features = cls(model, SeamlessM4TFeatureExtractor.from_pretrained(w2v_bert_path), stats["mean"],
                       stats["var"].sqrt(), **kwargs)
        return features.to(device)

    @classmethod
    def tiny(cls, layers: int = 3, output_layer: int = 2, seed: int = 0, **kwargs) -> "SemanticFeatures":
        """A random w2v-BERT for tests: the 1,024 width kept (DualCodec's input; the width is what the checkpoint's
        ConvNeXt reads), the rest small (`layers` conformer layers, 4 heads, FFN 64, depthwise kernel 5, relative
        positions 8 back and 4 ahead: about 7.6 M parameters a layer), random stats; the extractor is
        `SeamlessM4TFeatureExtractor()`'s defaults, w2v-BERT 2.0's (80 bins, stride 2, 16 kHz; its padding value
        fills only frames the attention mask hides)."""
        from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig, Wav2Vec2BertModel

        config = Wav2Vec2BertConfig(hidden_size=LATENT_DIM, num_hidden_layers=layers, num_attention_heads=4,
                                    intermediate_size=64, conv_depthwise_kernel_size=5,
                                    left_max_position_embeddings=8, right_max_position_embeddings=4,
                                    layerdrop=0.0, apply_spec_augment=False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Wav2Vec2BertModel(config)
            mean = 0.1 * torch.randn(LATENT_DIM)
            std = 0.5 + torch.rand(LATENT_DIM)
        return cls(model, SeamlessM4TFeatureExtractor(), mean, std, output_layer=output_layer, **kwargs)

    @staticmethod
    def resample(audio: np.ndarray) -> np.ndarray:
        """[T] float32 at 24 kHz -> 16 kHz with soxr (HQ, as the project's reference audio elsewhere), cut or
        zero-padded to torchaudio's ceil(2T / 3)."""
        import soxr

        out = soxr.resample(np.ascontiguousarray(audio, dtype=np.float32), SAMPLE_RATE, SEMANTIC_RATE,
                            quality="HQ")[:resampled_length(audio.shape[0])]
        return np.pad(out, (0, resampled_length(audio.shape[0]) - out.shape[0]))

    def hidden(self, audio: torch.Tensor) -> torch.Tensor:
        """audio [B, T] -> w2v-BERT's hidden_states[output_layer] [B, frames at 50 Hz, 1024] (before the stats)."""
        inputs = self.feature_extractor([self.resample(row) for row in audio.detach().float().cpu().numpy()],
                                        sampling_rate=SEMANTIC_RATE, return_tensors="pt")
        device, dtype = self.mean.device, next(self.model.parameters()).dtype
        out = self.model(input_features=inputs["input_features"].to(device, dtype),
                         attention_mask=inputs["attention_mask"].to(device), output_hidden_states=True)
        return out.hidden_states[self.output_layer]

    @torch.inference_mode()
    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """audio [B, T] float at 24 kHz (the rows' own lengths: equal) -> [B, semantic_frames(T), 1024] float32 at
        12.5 Hz on the buffers' device."""
        if audio.dim() != 2:
            raise ValueError(f"want audio [B, T], got {tuple(audio.shape)}")
        frames = semantic_frames(audio.shape[1], self.downsample)
        if frames < 1:
            raise ValueError(f"{audio.shape[1]} samples at 24 kHz are too short for one semantic frame")
        device = self.mean.device
        with torch.autocast(device.type, dtype=torch.float16, enabled=self.autocast):
            feat = (self.hidden(audio) - self.mean) / self.std
            feat = nn.functional.avg_pool1d(feat.transpose(1, 2), self.downsample, self.downsample)
        if feat.shape[2] != frames:
            raise RuntimeError(f"{feat.shape[2]} semantic frames, the length rule says {frames}")
        return feat.transpose(1, 2).float()
