"""SNAC 24 kHz (PyPI `snac`) behind the `Codec` interface: frames of 7 codes -> 2048 samples each.

A frame's codes are regrouped into SNAC's three levels (`frames.frames_to_levels`) and decoded by
the package's own quantizer and decoder. Two changes to the package's decode, both for serving:
- The decoder's noise injection (`NoiseBlock`: x + randn * linear(x)) is removed, so the same codes
  always give the same audio (the contract promises that per seed) and windows can match a full
  decode at all. It is the decode at zero noise, not the package's sampled one.
- Weight norm is folded into plain weights after loading (the same function, fewer kernels).

Windows: SNAC's decoder is *not* causal. Its convolutions are centred, and a sample depends on
codes about 2.3 frames to either side (measured by perturbing one frame:
tests/unit/test_orpheus_codec.py). So `left_context_frames` = 3 makes a window's start exact, and
`lookahead_frames` (a serving setting, default 2) makes a chunk wait for that many frames after it,
which its window decodes as right context: on the full-size codec with random weights, a chunked
decode's largest error against a full decode is 0.16 with no lookahead, 9e-3 with 1 frame, 1.8e-4
with 2 and 5e-7 (exact) with 3 (output std 0.11; tests/unit/test_orpheus_codec.py). Two frames
cost 14 more LM tokens before a chunk leaves; the error left is 55 dB below the signal. No
overlap: the decoder has no state to carry, so the seams need no cross-fade. (canopylabs' streaming
decoder waits for 2 frames of lookahead and keeps 1 frame of a 4-frame window.) Because of the
same non-causality, `decode_windows` cannot right-pad windows to one length: it batches windows of
equal length only.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn
from torch.nn.utils import parametrize

from protocol.settings import read_settings

from ..base import Codec, CodecShape
from .frames import CODES_PER_SLOT, FRAME_TOKENS, frames_to_levels

SNAC_DIR = "snac"  # the codec's folder inside a checkpoint dir
SNAC_HF_ID = "hubertsiuzdak/snac_24khz"  # where it comes from otherwise (the local Hugging Face cache)
CONFIG_FILE = "config.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # ours, the official one


@dataclass(frozen=True)
class SnacConfig:
    """The `snac.SNAC` constructor arguments (its config.json), plus our serving setting `left_context_frames`.
    Defaults: hubertsiuzdak/snac_24khz."""

    sampling_rate: int = 24000
    encoder_dim: int = 48
    encoder_rates: tuple[int, ...] = (2, 4, 8, 8)
    latent_dim: int | None = None
    decoder_dim: int = 1024
    decoder_rates: tuple[int, ...] = (8, 8, 4, 2)
    attn_window_size: int | None = None
    codebook_size: int = CODES_PER_SLOT
    codebook_dim: int = 8
    vq_strides: tuple[int, ...] = (4, 2, 1)
    noise: bool = True
    depthwise: bool = True
    left_context_frames: int = field(default=3, metadata={"serving": True})
    lookahead_frames: int = field(default=2, metadata={"serving": True})

    def __post_init__(self) -> None:
        for name in ("encoder_rates", "decoder_rates", "vq_strides"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.vq_strides != (4, 2, 1) or self.codebook_size != CODES_PER_SLOT:
            raise ValueError("Orpheus frames need vq_strides (4, 2, 1) and 4096 codes per codebook")
        if self.attn_window_size is not None:
            raise ValueError("windowed attention in the SNAC decoder is not supported (24 kHz has none)")
        if math.prod(self.decoder_rates) != math.prod(self.encoder_rates):
            raise ValueError("decoder and encoder rates must give the same hop length")
        if self.left_context_frames < 0 or self.lookahead_frames < 0:
            raise ValueError(f"left_context_frames and lookahead_frames must be >= 0, got "
                             f"{self.left_context_frames} and {self.lookahead_frames}")

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.decoder_rates) * self.vq_strides[0]

    def snac_kwargs(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.metadata.get("serving")}

    @classmethod
    def from_dict(cls, d: dict) -> "SnacConfig":
        return read_settings(cls, d, ignore_unknown=True)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.snac_kwargs().items()}


class SnacCodec(Codec):
    """`snac.SNAC`'s quantizer + decoder (no encoder) on [B, T, 7] Orpheus frames."""

    def __init__(self, cfg: SnacConfig) -> None:
        super().__init__()
        from snac import SNAC

        self.cfg = cfg
        self.shape = CodecShape(FRAME_TOKENS, cfg.codebook_size, cfg.sampling_rate, cfg.samples_per_frame,
                                cfg.left_context_frames, cfg.lookahead_frames)
        self.snac = SNAC(**cfg.snac_kwargs())

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, T, 7] int64 in [0, 4096) -> audio: [B, T * 2048] float32 in [-1, 1]."""
        if codes.dim() != 3 or codes.shape[-1] != FRAME_TOKENS:
            raise ValueError(f"codes must be [B, T, {FRAME_TOKENS}], got {tuple(codes.shape)}")
        latents = self.snac.quantizer.from_codes(frames_to_levels(codes))  # [B, latent, 4T]
        return self.snac.decoder(latents)[:, 0].float().clamp(-1.0, 1.0)

    def decode_windows(self, windows: list[tuple[torch.Tensor, int]], conditions=None) -> list[torch.Tensor]:
        """As `Codec.decode_windows`, but one batch per window length: padding would leak into a
        window's last samples through the non-causal decoder."""
        self.check_conditions(windows, conditions)
        out: list[torch.Tensor | None] = [None] * len(windows)
        for length in sorted({codes.shape[0] for codes, _ in windows}):
            group = [i for i, (codes, _) in enumerate(windows) if codes.shape[0] == length]
            audio = self.decode(torch.stack([windows[i][0] for i in group]))  # [G, length * spf]
            spf = self.samples_per_frame
            for row, i in enumerate(group):
                out[i] = audio[row, windows[i][1] * spf:]
        return out

    # ------------------------------------------------------------ construction

    def prepare(self, device: torch.device | str) -> "SnacCodec":
        """For inference: drop the encoder and the noise, fold weight norm, move to `device` (float32,
        as the reference runs it: 20 M parameters, and bf16 snake activations lose precision)."""
        self.snac.encoder = nn.Identity()
        for module in self.snac.decoder.modules():
            if isinstance(module, nn.Sequential):
                for i, child in enumerate(module):
                    if type(child).__name__ == "NoiseBlock":
                        module[i] = nn.Identity()
        for module in list(self.snac.modules()):
            if parametrize.is_parametrized(module, "weight"):
                parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
        return self.to(device=device, dtype=torch.float32).eval()

    @classmethod
    def from_config(cls, cfg: SnacConfig, device: torch.device | str = "cpu", seed: int = 0) -> "SnacCodec":
        """Random weights, deterministic in `seed` (the package's own init)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            codec = cls(cfg)
        return codec.prepare(device)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu",
                        left_context_frames: int | None = None, lookahead_frames: int | None = None) -> "SnacCodec":
        """A SNAC folder (config.json + pytorch_model.bin or model.safetensors), strict on every key."""
        path = Path(path)
        cfg = SnacConfig.from_dict(json.loads((path / CONFIG_FILE).read_text()))
        if left_context_frames is not None:
            cfg = replace(cfg, left_context_frames=left_context_frames)
        if lookahead_frames is not None:
            cfg = replace(cfg, lookahead_frames=lookahead_frames)
        codec = cls(cfg)
        codec.snac.load_state_dict(read_weights(path), strict=True)
        return codec.prepare(device)


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        file = path / name
        if file.name.endswith(".safetensors") and file.exists():
            with safe_open(str(file), framework="pt", device="cpu") as f:
                return {k: f.get_tensor(k) for k in f.keys()}
        if file.exists():
            return torch.load(file, map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"no {' or '.join(WEIGHT_FILES)} in {path}")


def build_codec_checkpoint(cfg: SnacConfig, out_dir: str | Path, seed: int = 0) -> None:
    """Write a random SNAC in the official folder layout (weight-normed keys) to `out_dir`."""
    from snac import SNAC

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        snac = SNAC(**cfg.snac_kwargs())
    (out_dir / CONFIG_FILE).write_text(json.dumps(cfg.to_dict(), indent=2))
    state = {k: v.detach().contiguous() for k, v in snac.state_dict().items()}
    save_file(state, str(out_dir / WEIGHT_FILES[0]), metadata={"format": "pt"})
