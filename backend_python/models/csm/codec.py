"""Mimi (kyutai) as our `Codec`: transformers' `MimiModel` decoder, 32 codebooks at 12.5 frames/s
-> 24 kHz mono, 1920 samples per frame.

Weights are the `codec_model.*` tensors of the CSM checkpoint (config: its `codec_config`). Mimi's
own decoder cache covers only its transformer, not its convolutions, so it is no streaming state:
we decode stateless windows with `left_context_frames` of left context instead (the error against
a full decode is pinned by tests/unit/test_csm_codec.py). The decoder is causal (causal convs,
transposed convs trimmed on the right, a causal transformer), so right-padding windows is exact.
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..base import Codec, CodecShape
from ..optional_imports import hide_unimportable_optional_packages
from .checkpoint import CODEC_PREFIX, read_state_dict

log = logging.getLogger("voxlane.csm")
LEFT_CONTEXT_FRAMES = 8
TARGET_STD = 0.1  # the level a random codec is scaled to, so its waveform stays inside [-1, 1]
CALIBRATION_FRAMES = 8


def mimi_config(codec_config: dict):
    from transformers import MimiConfig  # heavy import, only when loading

    fields = {k: v for k, v in codec_config.items() if k not in ("model_type", "_frame_rate")}
    if codec_config.get("_frame_rate") is not None:  # how `MimiConfig.to_dict` writes an explicit frame rate
        fields.setdefault("frame_rate", codec_config["_frame_rate"])
    return MimiConfig.from_dict(fields)


class MimiCodec(Codec):
    """`model` is the checkpoint's `codec_model` (a transformers `MimiModel`); only its decoder runs."""

    def __init__(self, codec_config: dict, left_context_frames: int = LEFT_CONTEXT_FRAMES) -> None:
        hide_unimportable_optional_packages()
        # the module itself, not transformers' lazy attribute: an import failure then names its cause
        from transformers.models.mimi.modeling_mimi import MimiModel

        super().__init__()
        self.config = mimi_config(codec_config)
        self.shape = CodecShape(self.config.num_quantizers, self.config.codebook_size, self.config.sampling_rate,
                                round(self.config.sampling_rate / self.config.frame_rate), left_context_frames)
        self.model = MimiModel(self.config)

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, T, K] int64 in [0, codebook_size) -> audio: [B, T * 1920] float32 in [-1, 1]."""
        if codes.dim() != 3 or codes.shape[-1] != self.num_codebooks:
            raise ValueError(f"codes must be [B, T, {self.num_codebooks}], got {tuple(codes.shape)}")
        audio = self.model.decode(codes.transpose(1, 2), return_dict=True).audio_values  # [B, 1, samples]
        return audio[:, 0, : codes.shape[1] * self.samples_per_frame].float().clamp(-1.0, 1.0)

    # ------------------------------------------------------------ construction

    @classmethod
    def from_config(cls, codec_config: dict, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                    seed: int = 0) -> "MimiCodec":
        """Random weights, deterministic in `seed`: transformers' init, random codebooks (its init leaves
        them zero, which makes every code decode alike) and an output scaled to TARGET_STD."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            codec = cls(codec_config)
            randomise_codebooks(codec.model, torch.Generator().manual_seed(seed))
        calibrate_level(codec, torch.Generator().manual_seed(seed))
        return codec.to(device=device, dtype=dtype).eval()

    def _apply(self, fn, recurse: bool = True):
        """`to()` and friends: also drop the codebooks' cached `embed_sum / cluster_usage` (a plain
        attribute that transformers computes on first use and `to()` would leave on the old device/dtype)."""
        for module in self.modules():
            if hasattr(module, "_embed"):
                module._embed = None
        return super()._apply(fn, recurse)

    @classmethod
    def from_pretrained(cls, path: str | Path, codec_config: dict, device: torch.device | str = "cpu",
                        dtype: torch.dtype = torch.float32) -> "MimiCodec":
        """The `codec_model.*` tensors of a CSM checkpoint dir."""
        with torch.device(device):
            codec = cls(codec_config)
        state = read_state_dict(path, lambda k: k.startswith(CODEC_PREFIX))
        state = {k[len(CODEC_PREFIX):]: v for k, v in state.items()}
        missing, unexpected = codec.model.load_state_dict(state, strict=False)
        if missing:  # every parameter and codebook buffer must come from the checkpoint
            raise ValueError(f"{path}: codec weights missing: {missing[:5]} ({len(missing)} in all)")
        if unexpected:
            log.warning("ignoring %d unknown codec tensors, e.g. %s", len(unexpected), unexpected[:3])
        return codec.to(device=device, dtype=dtype).eval()


@torch.no_grad()
def randomise_codebooks(model, generator: torch.Generator) -> None:
    for name, buffer in model.named_buffers():
        if name.endswith("embed_sum"):
            buffer.copy_(torch.randn(buffer.shape, generator=generator))
        if name.endswith("cluster_usage"):
            buffer.copy_(0.5 + torch.rand(buffer.shape, generator=generator))  # exercises the division


@torch.no_grad()
def calibrate_level(codec: MimiCodec, generator: torch.Generator) -> None:
    """Scale the last conv so that random codes decode at about TARGET_STD."""
    codes = torch.randint(0, codec.codebook_size, (1, CALIBRATION_FRAMES, codec.num_codebooks), generator=generator)
    audio = codec.model.decode(codes.transpose(1, 2), return_dict=True).audio_values
    last = codec.model.decoder.layers[-1].conv
    gain = TARGET_STD / max(audio.std().item(), 1e-6)
    last.weight.mul_(gain)
    last.bias.mul_(gain)
