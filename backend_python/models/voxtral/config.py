"""Frozen configs for Voxtral-TTS, read from / written to the checkpoint's `params.json` (Mistral's layout:
the backbone's fields at the top, `multimodal.audio_model_args` for the audio embedding and the acoustic
transformer, `multimodal.audio_tokenizer_args` for the codec and the preset voices).

Codes per frame: one semantic code (a VQ of `semantic_codebook_size`) and `n_acoustic_codebook` FSQ codes of
`acoustic_codebook_size` levels. In the checkpoint's own id space every code is shifted by two specials
(0 EMPTY_AUDIO, 1 END_AUDIO); the engine and our codec see the unshifted codes, [0, size).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..layers.config_checks import check_attention

MODEL_TYPE = "voxtral_tts"
PARAMS_FILE = "params.json"
NUM_AUDIO_SPECIALS = 2  # EMPTY_AUDIO (0) and END_AUDIO (1) before each codebook's codes
EMPTY_AUDIO, END_AUDIO = 0, 1
DEFAULT_DECODING_STEPS = 7  # Euler steps of the flow (the reference's `n_decoding_steps` when params.json has none)
DEFAULT_CFG_ALPHA = 1.2


def padded_128(n: int) -> int:
    return 128 * ((n + 127) // 128)


@dataclass(frozen=True)
class BackboneConfig:
    """The Mistral decoder (`dim`, `n_layers`, …): GQA, SwiGLU, RMSNorm, RoPE, no q/k norm, no biases."""

    dim: int = 3072
    n_layers: int = 26
    head_dim: int = 128
    hidden_dim: int = 9216
    n_heads: int = 32
    n_kv_heads: int = 8
    rope_theta: float = 1_000_000.0
    norm_eps: float = 1e-5
    vocab_size: int = 131072
    tied_embeddings: bool = True

    def __post_init__(self) -> None:
        check_attention(self.n_heads, self.n_kv_heads, self.head_dim)


@dataclass(frozen=True)
class FlowHeadConfig:
    """`acoustic_transformer_args`: a bidirectional transformer over three tokens (the noisy acoustic vector, the
    time, the backbone's hidden state), integrated with `n_decoding_steps` Euler steps and guidance `cfg_alpha`."""

    input_dim: int = 3072
    dim: int = 3072
    n_layers: int = 3
    head_dim: int = 128
    hidden_dim: int = 9216
    n_heads: int = 32
    n_kv_heads: int = 8
    norm_eps: float = 1e-5
    n_decoding_steps: int = DEFAULT_DECODING_STEPS
    cfg_alpha: float = DEFAULT_CFG_ALPHA
    noise_scale: float = 1.0
    extra: dict[str, Any] = field(default_factory=lambda: {"use_biases": False, "rope_theta": 10000.0,
                                                           "sigma": 1e-5, "sigma_max": 1.0})

    def __post_init__(self) -> None:
        if self.n_decoding_steps < 1 or self.dim % 2:
            raise ValueError(f"need n_decoding_steps >= 1 and an even dim: {self}")
        check_attention(self.n_heads, self.n_kv_heads, self.head_dim, rope=False)  # bidirectional, no RoPE


@dataclass(frozen=True)
class CodecConfig:
    """`audio_tokenizer_args`, the decoder's part: a causal conv from the 292-channel latent (semantic VQ
    embedding + the acoustic FSQ values), transformer stages with ALiBi, causal sliding-window attention (windows
    doubling from `attn_sliding_window_size` / 2^(downsamplings)), transposed convs upsampling by
    `decoder_convs_strides`, and a conv to `pretransform_patch_size` samples per step."""

    sampling_rate: int = 24000
    pretransform_patch_size: int = 240
    patch_proj_kernel_size: int = 7
    semantic_codebook_size: int = 8192
    semantic_dim: int = 256
    acoustic_codebook_size: int = 21
    acoustic_dim: int = 36
    attn_sliding_window_size: int = 16
    dim: int = 1024
    hidden_dim: int = 4096
    head_dim: int = 128
    n_heads: int = 8
    n_kv_heads: int = 8
    qk_norm_eps: float = 1e-6
    norm_eps: float = 0.01
    layer_scale_init: float = 0.01
    encoder_convs_strides_str: str = "2,2,2,1"
    decoder_transformer_lengths_str: str = "2,2,2,2"
    decoder_convs_kernels_str: str = "3,4,4,4"
    decoder_convs_strides_str: str = "1,2,2,2"
    voice: dict[str, int] = field(default_factory=dict)  # preset voice name -> id
    extra: dict[str, Any] = field(default_factory=dict)  # the official fields we do not read, kept for writing

    @staticmethod
    def _ints(text: str) -> tuple[int, ...]:
        return tuple(int(v) for v in text.split(",") if v.strip())

    @property
    def decoder_lengths(self) -> tuple[int, ...]:
        return self._ints(self.decoder_transformer_lengths_str)

    @property
    def decoder_kernels(self) -> tuple[int, ...]:
        return self._ints(self.decoder_convs_kernels_str)

    @property
    def decoder_strides(self) -> tuple[int, ...]:
        return self._ints(self.decoder_convs_strides_str)

    @property
    def upsampling(self) -> int:
        product = 1
        for stride in self.decoder_strides:
            product *= stride
        return product

    @property
    def samples_per_frame(self) -> int:
        return self.pretransform_patch_size * self.upsampling

    @property
    def latent_dim(self) -> int:
        return self.semantic_dim + self.acoustic_dim

    def decoder_windows(self) -> tuple[int, ...]:
        """Each decoder stage's attention window: the encoder's last (the window halved per downsampling), doubled
        per upsampling before the stage (the reference's `half_attn_window_upon_downsampling`)."""
        window = self.attn_sliding_window_size
        for stride in self._ints(self.encoder_convs_strides_str):
            window //= stride
        windows = []
        for index, stride in enumerate(self.decoder_strides):
            window *= stride
            windows.append(window)
        return tuple(windows)

    def __post_init__(self) -> None:
        lengths = (len(self.decoder_lengths), len(self.decoder_kernels), len(self.decoder_strides))
        if len(set(lengths)) != 1:
            raise ValueError(f"decoder lengths, kernels and strides must have one entry per stage: {lengths}")
        check_attention(self.n_heads, self.n_kv_heads, self.head_dim, rope=False)  # ALiBi, no RoPE
        if min(self.decoder_windows()) < 1:
            raise ValueError(f"attention windows must be >= 1, got {self.decoder_windows()}")


@dataclass(frozen=True)
class VoxtralConfig:
    backbone: BackboneConfig
    flow: FlowHeadConfig
    codec: CodecConfig
    semantic_codebook_size: int = 8192
    acoustic_codebook_size: int = 21
    n_acoustic_codebook: int = 36
    frame_rate: float = 12.5
    audio_token_id: int = 24
    begin_audio_token_id: int = 25
    # text specials of Mistral's Tekken tokenizer (mistral_common's speech request): not in params.json
    bos_token_id: int = 1
    repeat_audio_text_token_id: int = 35
    next_audio_text_token_id: int = 36
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        c = self.codec
        if (self.semantic_codebook_size, self.acoustic_codebook_size, self.n_acoustic_codebook) != (
                c.semantic_codebook_size, c.acoustic_codebook_size, c.acoustic_dim):
            raise ValueError("the audio model and the audio tokenizer disagree on the codebooks")
        if abs(c.sampling_rate / c.samples_per_frame - self.frame_rate) > 1e-6:
            raise ValueError(f"frame_rate {self.frame_rate} is not the codec's {c.sampling_rate / c.samples_per_frame}")
        if self.flow.input_dim != self.backbone.dim:
            raise ValueError(f"the flow head reads a {self.flow.input_dim}-wide state, the backbone's is {self.backbone.dim}")
        if not c.voice:
            raise ValueError("a Voxtral-TTS config needs at least one preset voice (audio_tokenizer_args.voice)")

    @property
    def num_codebooks(self) -> int:
        return 1 + self.n_acoustic_codebook

    @property
    def codebook_sizes(self) -> tuple[int, ...]:
        """Ids per codebook in the audio embedding: the codes after the two specials."""
        return ((self.semantic_codebook_size + NUM_AUDIO_SPECIALS,)
                + (self.acoustic_codebook_size + NUM_AUDIO_SPECIALS,) * self.n_acoustic_codebook)

    @property
    def audio_embedding_rows(self) -> int:
        return padded_128(sum(self.codebook_sizes))

    @property
    def semantic_head_size(self) -> int:
        return padded_128(self.semantic_codebook_size + NUM_AUDIO_SPECIALS)

    @property
    def voices(self) -> tuple[str, ...]:
        """Preset voices in id order."""
        return tuple(sorted(self.codec.voice, key=self.codec.voice.get))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VoxtralConfig":
        if d.get("model_type", MODEL_TYPE) != MODEL_TYPE:
            raise ValueError(f"not a Voxtral-TTS params.json: model_type {d.get('model_type')!r}")
        multimodal = d["multimodal"]
        audio, tokenizer = multimodal["audio_model_args"], multimodal["audio_tokenizer_args"]
        flow = dict(audio["acoustic_transformer_args"])
        if flow.get("use_biases"):
            raise ValueError("an acoustic transformer with biases is not supported")
        encoding = audio["audio_encoding_args"]
        if encoding.get("codebook_pattern", "parallel") != "parallel" or audio.get(
                "input_embedding_concat_type", "sum") != "sum":
            raise ValueError("only the parallel codebook pattern with summed embeddings is supported")
        backbone = BackboneConfig(**_known(BackboneConfig, d))
        flow_config = FlowHeadConfig(**{k: v for k, v in _known(FlowHeadConfig, flow).items() if v is not None},
                                     extra={k: v for k, v in flow.items() if k not in _names(FlowHeadConfig)})
        codec = CodecConfig(**_known(CodecConfig, tokenizer),
                            extra={k: v for k, v in tokenizer.items() if k not in _names(CodecConfig)})
        scalars = {k: audio[k] for k in ("semantic_codebook_size", "acoustic_codebook_size", "n_acoustic_codebook",
                                         "audio_token_id", "begin_audio_token_id") if k in audio}
        ours = {k: d["voxlane"][k] for k in ("repeat_audio_text_token_id", "next_audio_text_token_id")
                if k in d.get("voxlane", {})}
        extra = {k: v for k, v in d.items()
                 if k not in _names(BackboneConfig) and k not in ("multimodal", "voxlane", "model_type")}
        return cls(backbone, flow_config, codec, frame_rate=encoding["frame_rate"],
                   bos_token_id=multimodal.get("bos_token_id", 1), extra=extra, **scalars, **ours)

    @classmethod
    def from_dir(cls, path: str | Path) -> "VoxtralConfig":
        return cls.from_dict(json.loads((Path(path) / PARAMS_FILE).read_text()))

    def to_dict(self) -> dict[str, Any]:
        b, f, c = self.backbone, self.flow, self.codec
        flow = {**f.extra, **{k: getattr(f, k) for k in _names(FlowHeadConfig) if k not in ("extra", "noise_scale")}}
        tokenizer = {**c.extra, **{k: getattr(c, k) for k in _names(CodecConfig) if k != "extra"}}
        audio = {"semantic_codebook_size": self.semantic_codebook_size,
                 "acoustic_codebook_size": self.acoustic_codebook_size,
                 "n_acoustic_codebook": self.n_acoustic_codebook,
                 "audio_encoding_args": {"codebook_pattern": "parallel", "num_codebooks": self.num_codebooks,
                                         "sampling_rate": c.sampling_rate, "frame_rate": self.frame_rate},
                 "audio_token_id": self.audio_token_id, "begin_audio_token_id": self.begin_audio_token_id,
                 "input_embedding_concat_type": "sum", "acoustic_transformer_args": flow}
        return {**self.extra, **{k: getattr(b, k) for k in _names(BackboneConfig)}, "model_type": MODEL_TYPE,
                "multimodal": {"bos_token_id": self.bos_token_id, "audio_model_args": audio,
                               "audio_tokenizer_args": tokenizer},
                "voxlane": {"repeat_audio_text_token_id": self.repeat_audio_text_token_id,
                            "next_audio_text_token_id": self.next_audio_text_token_id}}


def _names(cls) -> set[str]:
    return {f.name for f in fields(cls)}


def _known(cls, d: dict[str, Any]) -> dict[str, Any]:
    return {k: d[k] for k in _names(cls) if k in d and k != "extra"}
