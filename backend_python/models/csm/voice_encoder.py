"""`CsmVoiceEncoder`: reference audio -> Mimi codes, the context segment CSM clones a voice from.

CSM has no speaker embedding: it clones in context, hearing the reference (its transcript and its codes) as
an earlier turn of the conversation (`CsmLM.encode_prompt`). The codes come from Mimi's encoder
(transformers' `MimiModel.encode`) on the checkpoint's `codec_model.*` weights, loaded as the codec loads
them (`MimiCodec`), so the reference is coded in the codebooks the codec decodes. It runs in float32
whatever the serving dtype: which code a frame gets must not depend on it (Mimi is ~79 M parameters).
"""
from __future__ import annotations

import torch

from ..base import VoiceEncoder
from .codec import MimiCodec
from .prompt import REF_CODES


class CsmVoiceEncoder(VoiceEncoder):
    """`encode` -> {"ref_codes": [T, 32] int64}, one frame per 1920 samples at 24 kHz (the last one partial)."""

    def __init__(self, codec: MimiCodec) -> None:
        super().__init__()
        self.model = codec.float().eval().model  # the whole MimiModel (MimiCodec.float drops its stale caches)
        self.num_codebooks, self.samples_per_frame = codec.num_codebooks, codec.samples_per_frame
        self._sample_rate = codec.sample_rate
        self.reference_tensors = {REF_CODES: ("INT32", [-1, codec.num_codebooks])}
        self.code_limits = (codec.codebook_size,) * codec.num_codebooks

    @property
    def sample_rate(self) -> int:
        return self._sample_rate

    @torch.inference_mode()
    def encode(self, audio: list[torch.Tensor], x_vector_only: list[bool]) -> list[dict[str, torch.Tensor]]:
        """Each utterance alone (as transformers' CSM encodes its context audio). x_vector_only is refused:
        CSM has no speaker embedding to clone from without the reference's codes and transcript."""
        self.check_flags(audio, x_vector_only)
        if any(x_vector_only):
            raise ValueError("CSM clones a voice only in context (it has no speaker embedding): x_vector_only is not "
                             "supported; send the reference's transcript instead")
        return [{REF_CODES: self._codes(a)} for a in audio]

    def _codes(self, audio: torch.Tensor) -> torch.Tensor:
        """audio: [N] float32 -> [ceil(N / samples_per_frame), K] int64 on the CPU."""
        if audio.dim() != 1 or audio.numel() < self.samples_per_frame:
            raise ValueError(f"reference audio must be mono [N] with N >= {self.samples_per_frame} (one frame), "
                             f"got {tuple(audio.shape)}")
        values = audio.to(self.device, torch.float32)[None, None]  # [1, 1, N]
        codes = self.model.encode(values, return_dict=True).audio_codes  # [1, K, T]
        return codes[0].transpose(0, 1).long().cpu()
