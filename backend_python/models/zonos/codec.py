"""DAC 44.1 kHz (transformers' `DacModel`, the reference's codec) behind the `Codec` interface: frames of 9 codes
-> 512 samples each (~86.13 frames/s).

Only the quantizer's `from_codes` and the decoder run. The decoder is *not* causal: its convolutions are centred,
and perturbing one frame changes the audio from ~9.3 frames before it to ~10.3 after it (the receptive field:
tests/unit/test_zonos_codec.py). So a chunk waits for `LOOKAHEAD_FRAMES` frames after it, which its window decodes
as right context, and takes `LEFT_CONTEXT_FRAMES` before it: the whole receptive field, so a windowed decode equals
a full decode up to float rounding (3e-5 of the signal on random weights whose output depends on every code; 0.3
with 8 frames of lookahead, 0.5 with 6). Trained weights may reach less far; fewer frames are a measurement on the
real DAC away. The lookahead costs time to first audio: a chunk leaves 10 LM steps after its last frame (~116 ms
of audio). No overlap: the decoder keeps no state across windows. Because of the same non-causality,
`decode_windows` batches windows of equal length only (right-padding would leak into a window's last samples).
The reference decodes in float16 autocast on a GPU; we decode in float32.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..base import Codec, CodecShape
from ..optional_imports import hide_unimportable_optional_packages

LEFT_CONTEXT_FRAMES = 10
LOOKAHEAD_FRAMES = 10
TARGET_STD = 0.1  # the level a random codec is scaled to, so its waveform stays inside [-1, 1]
CALIBRATION_FRAMES = 16


def dac_config(fields: dict):
    from transformers import DacConfig  # heavy import, only when loading

    return DacConfig(**{k: v for k, v in fields.items() if k not in ("model_type", "transformers_version")})


class DacCodec(Codec):
    """`model` is a transformers `DacModel` (its encoder is not used)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        config = model.config
        self.shape = CodecShape(config.n_codebooks, config.codebook_size, config.sampling_rate, config.hop_length,
                                LEFT_CONTEXT_FRAMES, LOOKAHEAD_FRAMES)

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, T, 9] int64 in [0, 1024) -> audio: [B, T * 512] float32 in [-1, 1]."""
        if codes.dim() != 3 or codes.shape[-1] != self.num_codebooks:
            raise ValueError(f"codes must be [B, T, {self.num_codebooks}], got {tuple(codes.shape)}")
        latents = self.model.quantizer.from_codes(codes.transpose(1, 2))[0]  # [B, hidden, T]
        audio = self.model.decoder(latents)[:, 0]  # [B, samples]
        return audio[:, : codes.shape[1] * self.samples_per_frame].float().clamp(-1.0, 1.0)

    def decode_windows(self, windows: list[tuple[torch.Tensor, int]], conditions=None) -> list[torch.Tensor]:
        """As `Codec.decode_windows`, one batch per window length (see the module docstring)."""
        self.check_conditions(windows, conditions)
        out: list[torch.Tensor | None] = [None] * len(windows)
        spf = self.samples_per_frame
        for length in sorted({codes.shape[0] for codes, _ in windows}):
            group = [i for i, (codes, _) in enumerate(windows) if codes.shape[0] == length]
            audio = self.decode(torch.stack([windows[i][0] for i in group]))
            for row, i in enumerate(group):
                out[i] = audio[row, windows[i][1] * spf:]
        return out

    # ------------------------------------------------------------ construction

    @classmethod
    def from_config(cls, fields: dict, device: torch.device | str = "cpu", seed: int = 0) -> "DacCodec":
        """Random weights, deterministic in `seed`, the output scaled to TARGET_STD (`randomise`)."""
        hide_unimportable_optional_packages()
        from transformers.models.dac.modeling_dac import DacModel

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            codec = cls(DacModel(dac_config(fields)))
        randomise(codec.model, torch.Generator().manual_seed(seed))
        calibrate_level(codec, torch.Generator().manual_seed(seed))
        return codec.to(device=device, dtype=torch.float32).eval()

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu") -> "DacCodec":
        """A `DacModel` dir (ours under `dac/`, or descript/dac_44khz)."""
        hide_unimportable_optional_packages()
        from transformers.models.dac.modeling_dac import DacModel

        return cls(DacModel.from_pretrained(str(path))).to(device=device, dtype=torch.float32).eval()

    def save(self, out_dir: str | Path) -> None:
        self.model.save_pretrained(str(out_dir))


@torch.no_grad()
def randomise(model, generator: torch.Generator) -> None:
    """Signal-preserving random weights: convolutions N(0, 1/fan_in), zero biases, codebooks N(0, 1). transformers'
    init (N(0, 0.02²)) fades the codes out: its audio is a bias pattern that hardly depends on them (a random code
    change moved it by 5e-5 of its level), which would make every audio comparison pass."""
    for module in model.modules():
        if isinstance(module, (nn.Conv1d, nn.Linear)):
            module.weight.normal_(0.0, module.weight[0].numel() ** -0.5, generator=generator)
        elif isinstance(module, nn.ConvTranspose1d):  # fan-in per output sample: in_channels * kernel / stride
            fan_in = module.weight.shape[0] * module.weight.shape[2] / module.stride[0]
            module.weight.normal_(0.0, fan_in ** -0.5, generator=generator)
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, 1.0, generator=generator)
        if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d, nn.Linear)) and module.bias is not None:
            module.bias.zero_()


@torch.no_grad()
def calibrate_level(codec: DacCodec, generator: torch.Generator) -> None:
    """Scale the decoder's last conv so that random codes decode at about TARGET_STD (measured before its tanh,
    which a saturated level would hide)."""
    codes = torch.randint(0, codec.codebook_size, (1, CALIBRATION_FRAMES, codec.num_codebooks), generator=generator)
    last, levels = codec.model.decoder.conv2, []
    hook = last.register_forward_hook(lambda module, inputs, output: levels.append(output.std().item()))
    codec.decode(codes)
    hook.remove()
    gain = TARGET_STD / max(levels[0], 1e-6)
    last.weight.mul_(gain)
    last.bias.mul_(gain)
