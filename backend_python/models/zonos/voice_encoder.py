"""`ZonosVoiceEncoder`: reference audio -> the 128-d speaker vector Zonos clones a voice from (`speaker.py`).

The embedding takes the speaker's place in the prefix (`ZonosLM.encode_prompt`); Zonos has no in-context
cloning, so the reference's transcript is not used and `x_vector_only` changes nothing. Each utterance is encoded
alone (its statistics pooling spans the whole utterance), in float32 whatever the serving dtype.
"""
from __future__ import annotations

import torch

from ..base import VoiceEncoder
from .speaker import N_FFT, SAMPLE_RATE, SpeakerEmbedding

SPEAKER_EMBEDDING = "speaker_embedding"  # the VoiceReference tensor: [128] float32


class ZonosVoiceEncoder(VoiceEncoder):
    def __init__(self, model: SpeakerEmbedding) -> None:
        super().__init__()
        self.model = model.float().eval()
        self.reference_tensors = {SPEAKER_EMBEDDING: ("FP32", [model.config.lda_dim])}

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE

    @torch.inference_mode()
    def encode(self, audio: list[torch.Tensor], x_vector_only: list[bool]) -> list[dict[str, torch.Tensor]]:
        self.check_flags(audio, x_vector_only)
        for a in audio:
            if a.dim() != 1 or a.numel() <= N_FFT:
                raise ValueError(f"reference audio must be mono [N] with N > {N_FFT} samples at {SAMPLE_RATE} Hz, "
                                 f"got {tuple(a.shape)}")
        return [{SPEAKER_EMBEDDING: self.model(a.to(self.device, torch.float32)).cpu()} for a in audio]
