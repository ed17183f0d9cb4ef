"""`HiggsVoiceEncoder`: reference audio -> the Higgs audio tokenizer's codes, which the prompt puts in context.

The tokenizer's encoder (`HiggsAudioTokenizer._xcodec_encode`): the acoustic branch (a DAC encoder, transformers'
`DacEncoder` on the official `encoder.block.*` weights renamed) on the 24 kHz audio; the semantic branch
(HuBERT-base's hidden states averaged over its layers, on the audio at 16 kHz padded by 160 samples each side,
every `semantic_downsample_factor`-th frame) through `encoder_semantic`; both concatenated, `fc_prior`, then the
RVQ's nearest codes layer by layer. Not as the reference: the 16 kHz resampling is soxr's, not torchaudio's
sinc (torchaudio is not installable here); HuBERT is transformers' `HubertModel` on `semantic_model.*`
(the official tokenizer loads `bosonai/hubert_base` with remote code: its names are assumed to be HuBERT's).
The Whisper features the reference LM can also take (`<|AUDIO|>`) are not computed: the LM hears the codes.
It runs in float32 whatever the serving dtype: a frame's codes must not depend on it.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..base import VoiceEncoder
from ..optional_imports import hide_unimportable_optional_packages
from .checkpoint import encoder_names, read_tokenizer_state
from .codec import HiggsTokenizerCodec, dac_config
from .config import AudioTokenizerConfig
from .prompt import REF_CODES

HUBERT_PAD = 160  # samples of 16 kHz audio padded on each side before HuBERT (the reference's `get_regress_target`)


def hubert_config(cfg: AudioTokenizerConfig) -> dict:
    """The semantic model's `HubertConfig` fields: the tokenizer config's `semantic_model_config` (ours; the
    official config names only `semantic_techer`), else HuBERT-base's defaults; never masked."""
    fields = {k: v for k, v in cfg.extra.get("semantic_model_config", {}).items() if k != "model_type"}
    return {**fields, "mask_time_prob": 0.0}


class SemanticResidualUnit(nn.Module):
    """xcodec's `ResidualUnit` (ELU, k3 conv, ELU, 1x1 conv; no biases), its official names."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Module()
        self.conv1.conv = nn.Conv1d(channels, channels, 3, padding=1, bias=False)
        self.conv2 = nn.Conv1d(channels, channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = nn.functional.elu
        return x + self.conv2(act(self.conv1.conv(act(x))))


class SemanticEncoder(nn.Module):
    """`encoder_semantic`: xcodec's semantic `Encoder` at its defaults (2 blocks of 2 residual units, stride 1)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Module()
        self.conv.conv = nn.Conv1d(channels, channels, 3, padding=1, bias=False)
        self.conv_blocks = nn.ModuleList(self._block(channels) for _ in range(2))

    @staticmethod
    def _block(channels: int) -> nn.Module:
        block = nn.Module()
        block.res_units = nn.ModuleList(SemanticResidualUnit(channels) for _ in range(2))
        block.conv = nn.Module()
        block.conv.conv = nn.Conv1d(channels, channels, 3, padding=1)
        return block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv.conv(x)
        for block in self.conv_blocks:
            for unit in block.res_units:
                x = unit(x)
            x = block.conv.conv(x)
        return x


class HiggsVoiceEncoder(VoiceEncoder):
    """`encode` -> {"ref_codes": [T, 8] int64}, one frame per 960 samples at 24 kHz."""

    semantic_rate = 16000

    def __init__(self, cfg: AudioTokenizerConfig, hubert_config: dict, codec: HiggsTokenizerCodec) -> None:
        super().__init__()
        hide_unimportable_optional_packages()  # before transformers' modeling code loads (a scipy built for numpy 2)
        from transformers import HubertConfig, HubertModel
        from transformers.models.dac.modeling_dac import DacEncoder

        self.config = cfg
        self.encoder = DacEncoder(dac_config(cfg))
        self.semantic_model = HubertModel(HubertConfig(**hubert_config))
        self.encoder_semantic = SemanticEncoder(cfg.semantic_dim)
        self.fc_prior = nn.Linear(cfg.D + cfg.semantic_dim, cfg.quantizer_dim)
        self.quantizer = codec.quantizer
        self.reference_tensors = {REF_CODES: ("INT32", [-1, cfg.n_q])}
        self.code_limits = (cfg.bins,) * cfg.n_q

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def semantic_downsample_factor(self) -> int:
        """HuBERT's 50 Hz frames per codec frame (2 at 25 Hz)."""
        return round(self.config.hop_length / (self.config.sample_rate / self.semantic_rate) / 320)

    @torch.inference_mode()
    def encode(self, audio: list[torch.Tensor], x_vector_only: list[bool]) -> list[dict[str, torch.Tensor]]:
        """Each utterance alone. x_vector_only is refused: Higgs clones only in context (no speaker embedding)."""
        self.check_flags(audio, x_vector_only)
        if any(x_vector_only):
            raise ValueError("Higgs Audio clones a voice only in context (it has no speaker embedding): "
                             "x_vector_only is not supported; send the reference's transcript instead")
        return [{REF_CODES: self.codes(a)} for a in audio]

    def codes(self, audio: torch.Tensor) -> torch.Tensor:
        """audio [N] float32 at 24 kHz -> [T, K] int64 on the CPU."""
        hop = self.config.hop_length
        if audio.dim() != 1 or audio.numel() < hop:
            raise ValueError(f"reference audio must be mono [N] with N >= {hop} (one frame), got {tuple(audio.shape)}")
        values = audio.to(self.device, torch.float32)[None, None]  # [1, 1, N]
        semantic = self.encoder_semantic(self.semantic_features(audio).transpose(1, 2))  # [1, S, T]
        acoustic = self.encoder(values)  # [1, D, T']
        if acoustic.shape[2] != semantic.shape[2]:  # the reference pads the audio once and encodes it again
            pad = HUBERT_PAD * self.semantic_downsample_factor
            acoustic = self.encoder(nn.functional.pad(values, (pad, pad)))
        length = min(acoustic.shape[2], semantic.shape[2])
        latent = self.fc_prior(torch.cat((acoustic[..., :length], semantic[..., :length]), dim=1).transpose(1, 2))
        return self.quantize(latent)[0].cpu()

    def semantic_features(self, audio: torch.Tensor) -> torch.Tensor:
        """[N] at 24 kHz -> HuBERT's hidden states averaged over its layers, every factor-th frame: [1, T, S]."""
        import soxr

        wav = soxr.resample(audio.detach().cpu().numpy().astype(np.float32), self.sample_rate, self.semantic_rate,
                            quality="HQ")
        x = nn.functional.pad(torch.from_numpy(np.ascontiguousarray(wav)).to(self.device)[None], (HUBERT_PAD,) * 2)
        hidden = self.semantic_model(x, output_hidden_states=True).hidden_states
        return torch.stack(hidden, dim=1).mean(dim=1)[:, :: self.semantic_downsample_factor]

    def quantize(self, latent: torch.Tensor) -> torch.Tensor:
        """latent [B, T, quantizer_dim] -> codes [B, T, K]: each layer's nearest code to the residual."""
        residual, codes = latent, []
        for layer in self.quantizer.vq.layers:
            projected = layer.project_in(residual)  # [B, T, codebook_dim]
            embed = layer._codebook.embed
            distance = projected.pow(2).sum(-1, keepdim=True) - 2 * projected @ embed.T + embed.pow(2).sum(-1)
            index = distance.argmin(dim=-1)
            residual = residual - layer.decode(index)
            codes.append(index)
        return torch.stack(codes, dim=-1)

    # ------------------------------------------------------------ construction

    @classmethod
    def from_pretrained(cls, path, cfg: AudioTokenizerConfig, hubert_config: dict, codec: HiggsTokenizerCodec,
                        device="cpu") -> "HiggsVoiceEncoder":
        encoder = cls(cfg, hubert_config, codec.float())
        state = encoder_names(read_tokenizer_state(path), len(cfg.ratios))
        missing, _ = encoder.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith("quantizer.")]
        if missing:
            raise ValueError(f"audio tokenizer encoder weights missing: {missing[:5]} ({len(missing)} in all)")
        return encoder.to(device=device, dtype=torch.float32).eval()

    @classmethod
    def from_config(cls, cfg: AudioTokenizerConfig, hubert_config: dict, codec: HiggsTokenizerCodec, device="cpu",
                    seed: int = 0) -> "HiggsVoiceEncoder":
        """Random weights, deterministic in `seed` (the codebooks are the codec's)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            encoder = cls(cfg, hubert_config, codec.float())
        return encoder.to(device=device, dtype=torch.float32).eval()
