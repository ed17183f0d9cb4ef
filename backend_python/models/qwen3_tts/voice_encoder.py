"""`Qwen3TTSVoiceEncoder`: a Base model's reference audio -> its speaker embedding and, in-context, its codes.

The speaker encoder's weights are the checkpoint's `speaker_encoder.*` (model.safetensors), the codec
encoder's the speech tokenizer's `encoder.*` (speech_tokenizer/model.safetensors). Both take 24 kHz
mono audio; the caller resamples. Each utterance is encoded alone (see speaker_encoder.py on why).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from ..base import VoiceEncoder
from ..checkpoint_io import CONFIG_FILE, read_state_dict
from ..layers.empty_weights import empty_weights
from .checkpoint import SPEECH_TOKENIZER_DIR, read_config
from .codec_encoder import CodecEncoder, CodecEncoderConfig
from .config import SpeakerEncoderConfig
from .speaker_encoder import SpeakerEncoder, mel_filters, mel_spectrogram

SPEAKER_PREFIX, CODEC_ENCODER_PREFIX = "speaker_encoder.", "encoder."
SPEAKER_EMBEDDING, REF_CODES = "speaker_embedding", "ref_codes"  # the `VoiceReference.tensors` names


class Qwen3TTSVoiceEncoder(VoiceEncoder):
    """`encode` -> {"speaker_embedding": [enc_dim] float32, "ref_codes": [T, 16] int64 unless x-vector only}."""

    def __init__(self, speaker: SpeakerEncoderConfig, codec: CodecEncoderConfig) -> None:
        super().__init__()
        if speaker.sample_rate != codec.sampling_rate:
            raise ValueError(f"speaker encoder rate {speaker.sample_rate} != codec encoder rate {codec.sampling_rate}")
        self.speaker_encoder = SpeakerEncoder(speaker)
        self.encoder = CodecEncoder(codec)
        self.register_buffer("mel_filters", mel_filters(speaker.mel_dim, speaker.sample_rate), persistent=False)
        self._sample_rate = speaker.sample_rate
        self.reference_tensors = {SPEAKER_EMBEDDING: ("FP32", [speaker.enc_dim]),
                                  REF_CODES: ("INT32", [-1, codec.valid_num_quantizers])}
        self.code_limits = (codec.codebook_size,) * codec.valid_num_quantizers

    @property
    def sample_rate(self) -> int:
        return self._sample_rate

    @torch.inference_mode()
    def encode(self, audio: list[torch.Tensor], x_vector_only: list[bool]) -> list[dict[str, torch.Tensor]]:
        self.check_flags(audio, x_vector_only)
        return [self._encode_one(a, only) for a, only in zip(audio, x_vector_only)]

    def _encode_one(self, audio: torch.Tensor, x_vector_only: bool) -> dict[str, torch.Tensor]:
        if audio.dim() != 1 or audio.numel() < self.min_samples:
            raise ValueError(f"reference audio must be mono [N] with N >= {self.min_samples}, got {tuple(audio.shape)}")
        audio = audio.to(self.mel_filters.device, torch.float32)
        out = {SPEAKER_EMBEDDING: self.speaker_embedding(audio).float().cpu()}
        if not x_vector_only:
            out[REF_CODES] = self.encoder(audio[None].to(self.dtype))[0].cpu()
        return out

    @torch.inference_mode()
    def encode_codes(self, audio: list[torch.Tensor]) -> list[torch.Tensor]:
        """Input chunks -> their codes, without the speaker encoder; chunks of one length (a stream's windows on
        the fixed grid mostly are) go through the codec encoder as one batch."""
        codes: list[torch.Tensor | None] = [None] * len(audio)
        by_length: dict[int, list[int]] = {}
        for i, a in enumerate(audio):
            if a.dim() != 1 or a.numel() < self.min_samples:
                raise ValueError(f"input audio chunks must be mono [N] with N >= {self.min_samples}, got "
                                 f"{tuple(a.shape)}")
            by_length.setdefault(a.numel(), []).append(i)
        for indexes in by_length.values():
            batch = torch.stack([audio[i] for i in indexes]).to(self.mel_filters.device, self.dtype)
            for i, row in zip(indexes, self.encoder(batch).cpu()):
                codes[i] = row
        return codes

    def speaker_embedding(self, audio: torch.Tensor) -> torch.Tensor:
        """audio: [N] float32 -> x-vector [enc_dim] (the mel is computed in float32, as the reference does)."""
        mels = mel_spectrogram(audio, self.mel_filters)[None]  # [1, T, mel_dim]
        return self.speaker_encoder(mels.to(self.dtype))[0]

    @property
    def min_samples(self) -> int:
        """The reflection padding of the mel front end needs more samples than it pads."""
        return 1024

    @property
    def dtype(self) -> torch.dtype:
        return self.speaker_encoder.fc.weight.dtype

    # ---- construction ----------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "Qwen3TTSVoiceEncoder":
        """A Base checkpoint dir: strict on the tensors we build (the codec's unused quantizers are skipped)."""
        path = Path(path)
        codec_dir = path / SPEECH_TOKENIZER_DIR
        codec = CodecEncoderConfig.from_official(json.loads((codec_dir / CONFIG_FILE).read_text()))
        with empty_weights():
            model = cls(read_config(path).speaker_encoder, codec)
        wanted = set(model.state_dict())
        state = read_state_dict(path, lambda k: k.startswith(SPEAKER_PREFIX))
        state.update(read_state_dict(codec_dir, lambda k: k.startswith(CODEC_ENCODER_PREFIX) and k in wanted))
        model.load_state_dict({k: v.to(device=device, dtype=dtype) for k, v in state.items()}, strict=True, assign=True)
        return model._finish(device)

    @classmethod
    def from_config(cls, speaker: SpeakerEncoderConfig, codec: CodecEncoderConfig, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, seed: int = 0) -> "Qwen3TTSVoiceEncoder":
        """Random weights, deterministic in `seed` (random codebooks, so the codes depend on the audio)."""
        model = cls(speaker, codec)
        randomise(model, seed)
        return model.to(device=device, dtype=dtype)._finish(device)

    def _finish(self, device: str | torch.device) -> "Qwen3TTSVoiceEncoder":
        self.mel_filters = mel_filters(self.speaker_encoder.blocks[0].conv.in_channels, self._sample_rate).to(device)
        self.encoder.quantizer.float()  # codebooks in float32: code choice must not depend on the model dtype
        return self.eval()

    def codec_state(self) -> dict[str, torch.Tensor]:
        """The speech tokenizer's `encoder.*` tensors (to write a checkpoint)."""
        return {k: v for k, v in self.state_dict().items() if k.startswith(CODEC_ENCODER_PREFIX)}

    def speaker_state(self) -> dict[str, torch.Tensor]:
        """The model's `speaker_encoder.*` tensors (to write a checkpoint)."""
        return {k: v for k, v in self.state_dict().items() if k.startswith(SPEAKER_PREFIX)}


@torch.no_grad()
def randomise(model: nn.Module, seed: int) -> None:
    """N(0, 1/fan_in) weights, small biases, unit norms, N(0, 1) codebooks with usage in [0.5, 1.5)."""
    generator = torch.Generator().manual_seed(seed)
    for name, tensor in sorted(model.state_dict(keep_vars=True).items()):
        leaf, shape = name.rsplit(".", 1)[-1], tensor.shape
        if leaf == "embed_sum":
            value = torch.randn(shape, generator=generator)
        elif leaf == "cluster_usage":
            value = 0.5 + torch.rand(shape, generator=generator)
        elif leaf in ("initialized", "scale") or ("layernorm" in name and leaf == "weight"):
            continue  # the constructors' values: initialized 1, layer scale, unit norms
        elif leaf == "bias":
            value = 0.02 * torch.randn(shape, generator=generator)
        else:
            value = torch.randn(shape, generator=generator) / tensor[0].numel() ** 0.5
        tensor.copy_(value)
