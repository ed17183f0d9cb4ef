"""TontaubeV1 as the registry loads it; its presets, checkpoint and serving plan: description.py.

Checkpoint layout (checkpoint.py): the official bundle's `cb0/` … `cb3/` (a Qwen3 config.json with TontaubeV1's
fields, model.safetensors, tokenizer.json each), our `voices.safetensors` (preset voices as codes), `dualcodec/`
(the official `dualcodec_12hz_16384_4096.safetensors`) and, optionally, `vibevoice/` (VibeVoice-1.5B's acoustic
tokenizer: the reference's extracted config.json + model.safetensors, or transformers' save_pretrained layout).
Its LM lane runs the semantic model, its refinement lane the three refiners, its codec lanes DualCodec's decoder
and, where `vibevoice/` is there, the reference's VibeVoice re-synthesis after it, whose reach makes a window's
left context 222 frames instead of 27 (codec.py; `codec_windowing` reads it from the folder's config, no weights).
The random `tontaube-2.9b` re-synthesises too (random VibeVoice-1.5B-sized weights). A voice is cloned from reference
audio (up to 60 s) on the voice encoder lane: w2v-BERT 2.0 (`w2v-bert-2.0/`) and DualCodec's encoder code it
(voice_encoder.py); the random full shape has no voice encoder (no w2v-BERT weights).
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..layers.empty_weights import empty_weights
from . import checkpoint, vibevoice
from .codec import TontaubeCodec, checkpoint_vibevoice_config, windowing
from .dualcodec import full_config
from .lm import TontaubeLM
from .predictor import Predictor
from .presets import preset_config
from .refiner import TontaubeRefiner

RANDOM_SEED = 0
FULL_VOICE_FRAMES = 100  # the random full shape's one preset voice: 8 s of random codes


def build_tiny_checkpoint(preset: str, out_dir: Path) -> None:
    from .tiny import build_tiny_checkpoint as build
    build(out_dir, seed=RANDOM_SEED)


def load_lm(spec, device: str, dtype: torch.dtype) -> TontaubeLM:
    if spec.checkpoint is not None:
        return TontaubeLM.from_pretrained(spec.checkpoint, device=device, dtype=dtype)
    from .tiny import random_voice, text_tokenizer
    config = preset_config(spec.preset)
    voices = {"default": random_voice(FULL_VOICE_FRAMES, RANDOM_SEED)}
    return TontaubeLM.from_config(config, text_tokenizer(), voices, device=device, dtype=dtype, seed=RANDOM_SEED)


def load_refiner(spec, device: str, dtype: torch.dtype) -> TontaubeRefiner:
    config = checkpoint.read_config(spec.checkpoint) if spec.checkpoint is not None else preset_config(spec.preset)
    refiners = []
    for k in range(1, len(config.predictors)):
        with empty_weights():
            model = Predictor(config.predictors[k])
        if spec.checkpoint is not None:
            model.load_state_dict(checkpoint.read_weights(spec.checkpoint, k), strict=True, assign=True)
        else:
            from ..layers.random_init import init_random_weights
            model.to_empty(device="cpu")
            init_random_weights(model, RANDOM_SEED + k)
        refiners.append(model.to(device=device, dtype=dtype).eval())
    return TontaubeRefiner(config, refiners)


def load_codec(spec, device: str, dtype: torch.dtype) -> TontaubeCodec:
    """In float32, as the reference decodes on the CPU (fp16 on CUDA: the lane's dtype there)."""
    if spec.checkpoint is not None:
        codec = TontaubeCodec.from_dir(spec.checkpoint, device=device)
    else:
        codec = TontaubeCodec.random(full_config(), device=device, seed=RANDOM_SEED,
                                     vibevoice_config=vibevoice.full_config())
    return codec.to(dtype=dtype if device != "cpu" else torch.float32)


def load_voice_encoder(spec, device: str, dtype: torch.dtype):
    """Reference audio -> its codes (voice_encoder.py), in float32 (the reference encodes under fp16 autocast on
    CUDA); None for the random full shape (its w2v-BERT 2.0 is 600 M parameters of random weights: a real bundle
    brings it)."""
    if spec.checkpoint is None:
        return None
    from .codec import DUALCODEC_DIR, DUALCODEC_WEIGHTS
    from .voice_encoder import load
    return load(spec.checkpoint, DUALCODEC_DIR, DUALCODEC_WEIGHTS, device=device)


def preset_voices(spec) -> tuple[str, ...]:
    if spec.checkpoint is not None:
        return tuple(checkpoint.read_voices(spec.checkpoint))
    return ("default",)


def vibevoice_config(spec):
    """The VibeVoice acoustic tokenizer's config the model's codec re-synthesises with, or None: DualCodec alone
    (a checkpoint without `vibevoice/`). Read without weights."""
    return checkpoint_vibevoice_config(spec.checkpoint) if spec.checkpoint is not None else vibevoice.full_config()


def codec_left_context_frames(spec) -> int:
    return codec_windowing(spec).left_context_frames


def codec_windowing(spec):
    return windowing(vibevoice_config(spec))
