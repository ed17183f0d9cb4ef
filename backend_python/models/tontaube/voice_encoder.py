"""`TontaubeVoiceEncoder`: reference audio (up to 60 s) -> the voice-prompt codes TontaubeV1 clones a voice from.

As the reference encodes its voice prompts (`encode_voice_prompt`: DualCodec's `encode` with 4 quantizers): w2v-BERT
2.0's features of the audio (`SemanticFeatures`: its 17th layer, normalised, pooled to 12.5 Hz) and the audio itself
through DualCodec's encoder give the semantic code and three acoustic codes a frame (`ref_codes` [F, 4]). The
voice is the codes alone: the reference's transcript is not used and `x_vector_only` changes nothing (the
model has no speaker embedding). Each reference is encoded alone (its features span the whole clip).
"""
from __future__ import annotations

import torch

from ..base import VoiceEncoder
from .config import NUM_CODEBOOKS, SAMPLE_RATE
from .dualcodec_encoder import DualCodecEncoder, SemanticFeatures, semantic_frames

REF_CODES = "ref_codes"  # the VoiceReference tensor: [frames, 4] int64


class TontaubeVoiceEncoder(VoiceEncoder):
    def __init__(self, features: SemanticFeatures, encoder: DualCodecEncoder) -> None:
        super().__init__()
        self.features, self.encoder = features.eval(), encoder.eval()
        self.reference_tensors = {REF_CODES: ("INT64", [-1, NUM_CODEBOOKS])}

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE

    @torch.inference_mode()
    def encode(self, audio: list[torch.Tensor], x_vector_only: list[bool]) -> list[dict[str, torch.Tensor]]:
        if len(audio) != len(x_vector_only):
            raise ValueError(f"need one x_vector_only flag per audio, got {len(x_vector_only)} for {len(audio)}")
        return [{REF_CODES: self._codes(a)} for a in audio]

    def _codes(self, audio: torch.Tensor) -> torch.Tensor:
        if audio.dim() != 1 or semantic_frames(audio.numel()) < 1:
            raise ValueError(f"reference audio must be mono [N] of at least one frame at {SAMPLE_RATE} Hz, got "
                             f"{tuple(audio.shape)}")
        wav = audio.to(self.encoder_device, torch.float32)[None]
        semantic, acoustic = self.encoder.encode(wav, self.features(wav).to(self.encoder_device))
        return torch.cat((semantic[0, :, None], acoustic[0].T), dim=1).cpu()

    @property
    def encoder_device(self) -> torch.device:
        return next(self.encoder.parameters()).device
