"""`TontaubeCodec`: TontaubeV1's frames (the semantic code and three acoustic codes) -> 24 kHz audio through
DualCodec's decoder (dualcodec.py).

DAC's decoder is not causal, so a chunk's window holds `LOOKAHEAD_FRAMES` after its new ones (the reference
streams holding its last 5 codes back for the same reason) and `LEFT_CONTEXT_FRAMES` before them (the causal
ConvNeXt stack reads 4 × 6 frames back, DAC's first conv 3 more); windows of one length decode in one batch, so
no padding reaches a window's audio. A decode of T frames gives 1920 · T − 4 samples: the last four, which
belong to the lookahead, are zero-padded to whole frames.

The reference then re-synthesises DualCodec's audio through VibeVoice's acoustic tokenizer (vibevoice.py); that
stage is not in the codec lane yet, so this is the reference's DualCodec-only output (`ENABLE_VIBEVOICE=0`).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..base import Codec, CodecShape, CodecWindowing
from .config import SAMPLE_RATE, SEMANTIC_CODES
from .dualcodec import DualCodecConfig, DualCodecDecoder, decoder_state

LEFT_CONTEXT_FRAMES = 27
LOOKAHEAD_FRAMES = 5
WINDOWING = CodecWindowing(LEFT_CONTEXT_FRAMES, LOOKAHEAD_FRAMES, 0)
RANDOM_LEVEL = 0.2  # a random codec's output standard deviation (before tanh)
DUALCODEC_DIR, DUALCODEC_WEIGHTS, DUALCODEC_CONFIG = "dualcodec", "dualcodec_12hz_16384_4096.safetensors", \
    "voxlane_decoder.json"


class TontaubeCodec(Codec):
    def __init__(self, config: DualCodecConfig) -> None:
        super().__init__()
        self.dualcodec = DualCodecDecoder(config)
        self.shape = CodecShape(num_codebooks=4, codebook_size=SEMANTIC_CODES, sample_rate=SAMPLE_RATE,
                                samples_per_frame=config.hop_length, left_context_frames=LEFT_CONTEXT_FRAMES,
                                lookahead_frames=LOOKAHEAD_FRAMES)

    @classmethod
    def from_dir(cls, path: Path, device="cpu") -> "TontaubeCodec":
        """`path/dualcodec/`: the official weights file and the decoder's shape (ours; the official `12hz_v1`
        when absent)."""
        from safetensors.torch import load_file
        folder = path / DUALCODEC_DIR
        shape = folder / DUALCODEC_CONFIG
        config = DualCodecConfig(**{k: tuple(v) if isinstance(v, list) else v
                                    for k, v in json.loads(shape.read_text()).items()}) if shape.is_file() \
            else DualCodecConfig()
        codec = cls(config)
        state = decoder_state(load_file(str(folder / DUALCODEC_WEIGHTS)), config.n_acoustic)
        codec.dualcodec.load_state_dict(state, strict=True)
        return codec.to(device).eval()

    @classmethod
    def random(cls, config: DualCodecConfig, device="cpu", seed: int = 0) -> "TontaubeCodec":
        """Random weights as DAC starts them (its modules' own init), from `seed`."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            codec = cls(config)
            probe = torch.stack([torch.randint(0, config.semantic_codebook_size, (16,)),
                                 *torch.randint(0, config.codebook_size, (config.n_acoustic, 16))], dim=1)
        with torch.no_grad():  # DAC's N(0, 0.02) start is all but silent: scale its last conv to speech levels
            last = codec.dualcodec.dac.decoder.model[-2]
            last.weight_g.mul_(RANDOM_LEVEL / codec.decode(probe[None]).std().clamp_min(1e-12))
        return codec.to(device).eval()

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T, 4] -> [B, T * 1920] (the decoder's last four samples padded)."""
        audio = self.dualcodec.decode(codes[..., 0], codes[..., 1:].transpose(1, 2))
        return torch.nn.functional.pad(audio, (0, codes.shape[1] * self.samples_per_frame - audio.shape[1]))

    def decode_windows(self, windows: list[tuple[torch.Tensor, int]], conditions=None) -> list[torch.Tensor]:
        """One batch per window length: padding would reach a window's audio through the non-causal decoder."""
        self.check_conditions(windows, conditions)
        out: list[torch.Tensor | None] = [None] * len(windows)
        for length in sorted({codes.shape[0] for codes, _ in windows}):
            group = [i for i, (codes, _) in enumerate(windows) if codes.shape[0] == length]
            audio = self.decode(torch.stack([windows[i][0] for i in group]))
            for row, i in enumerate(group):
                out[i] = audio[row, windows[i][1] * self.samples_per_frame:]
        return out
