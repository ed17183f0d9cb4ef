"""Reading (and naming for writing) checkpoints in the official Higgs Audio layout; the tiny builder is `tiny.py`.

A checkpoint dir holds the LM as Boson AI's `HiggsAudioModel` saves it (config.json with model_type
`higgs_audio`, model.safetensors[.index.json], the text tokenizer files), `voices.safetensors` (preset
voices' codes, ours), and the audio tokenizer in `audio_tokenizer/` as `bosonai/higgs-audio-v2-tokenizer`
ships it (config.json and model.pth, or model.safetensors).

LM parameter names are the official ones (`embed_tokens`, `layers.*`, `norm`, `audio_codebook_embeddings`,
`audio_decoder_proj.audio_lm_head`); our backbone module sits under `model.`. The text head
(`audio_decoder_proj.text_lm_head`) and the Whisper tower are not loaded: the LM only speaks. The codec keeps
the official names of the RVQ (`quantizer.vq.layers.*`) and `fc_post2`; its decoder is transformers'
`DacDecoder`, so `decoder_2.model.*` is renamed onto it, and weight norm (`weight_g`/`weight_v`, or
`parametrizations.weight.original0/1`) is folded into plain weights.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint_io import read_state_dict
from .config import HiggsV3Config

BACKBONE_PREFIX = "model."
BACKBONE_KEYS = ("embed_tokens.", "layers.", "norm.")
SKIPPED_LM_KEYS = ("audio_decoder_proj.text_lm_head.", "audio_tower.", "audio_encoder_proj.")
TOKENIZER_DIR = "audio_tokenizer"
VOICES_FILE = "voices.safetensors"
CODEC_KEYS = ("quantizer.", "fc_post2.", "decoder_2.")
ENCODER_KEYS = ("quantizer.", "fc_prior.", "encoder.", "encoder_semantic.", "semantic_model.")
SEMANTIC_PREFIX = "semantic_model."
OLD_WEIGHT_NORM = {"weight_g": "parametrizations.weight.original0", "weight_v": "parametrizations.weight.original1"}


def read_config(path: str | Path) -> HiggsV3Config:
    return HiggsV3Config.from_dir(path, TOKENIZER_DIR)


def load_tokenizer(path: str | Path):
    """The checkpoint's text tokenizer (tokenizer.json; Qwen3's, with Higgs's audio tokens added)."""
    from transformers import PreTrainedTokenizerFast  # heavy import, only when loading

    return PreTrainedTokenizerFast.from_pretrained(str(path))


def read_lm_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The LM's tensors under our names (the backbone under `model.`), without the text head."""
    state = read_state_dict(path, lambda k: not k.startswith(SKIPPED_LM_KEYS))
    if not state:
        raise ValueError(f"no Higgs Audio weights in {path}")
    return {(BACKBONE_PREFIX + k if k.startswith(BACKBONE_KEYS) else k): v for k, v in state.items()}


def official_lm_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our LM state dict under the official names (what `read_lm_state_dict` reads back)."""
    return {(k[len(BACKBONE_PREFIX):] if k.startswith(BACKBONE_PREFIX) else k): v for k, v in state.items()}


def read_voices(path: str | Path) -> dict[str, torch.Tensor]:
    """Preset voices' reference codes, name -> [T, K] int64 (none where the file is absent)."""
    from safetensors.torch import load_file

    file = Path(path) / VOICES_FILE
    return {k: v.to(torch.int64) for k, v in load_file(str(file)).items()} if file.exists() else {}


def read_tokenizer_state(path: str | Path) -> dict[str, torch.Tensor]:
    """The audio tokenizer's tensors (official names, weight norm folded), from model.safetensors or model.pth."""
    directory = Path(path) / TOKENIZER_DIR
    if (directory / "model.safetensors").exists():
        state = read_state_dict(directory, lambda k: True)
    else:
        state = torch.load(str(directory / "model.pth"), map_location="cpu", weights_only=True)
    return fold_weight_norm(state)


def fold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`X.weight_g` + `X.weight_v` (torch's old weight norm) or `X.parametrizations.weight.original0/1` -> `X.weight`
    = g · v / ‖v‖, the norm over every dim but 0 (weight norm's default `dim=0`, for transposed convs too)."""
    out = dict(state)
    for g_key, v_suffix, base in _weight_norm_pairs(state):
        if g_key.startswith(SEMANTIC_PREFIX):  # HuBERT keeps its own weight norm (over dim 2): renamed, not folded
            continue
        g, v = out.pop(g_key), out.pop(base + v_suffix)
        norm = v.float().pow(2).sum(dim=tuple(range(1, v.dim())), keepdim=True).sqrt()
        out[base + "weight"] = (v.float() * (g.float() / norm)).to(v.dtype)
    return out


def _weight_norm_pairs(state: dict[str, torch.Tensor]) -> list[tuple[str, str, str]]:
    pairs = []
    for key in state:
        for g_suffix, v_suffix, strip in (("weight_g", "weight_v", "weight_g"),
                                          ("parametrizations.weight.original0", "parametrizations.weight.original1",
                                           "parametrizations.weight.original0")):
            if key.endswith(g_suffix):
                base = key[: -len(strip)]
                pairs.append((key, v_suffix, base))
    return pairs


def decoder_names(num_ratios: int) -> list[tuple[str, str]]:
    """(official `decoder_2.model.*` prefix, transformers `DacDecoder` prefix) pairs for a decoder of
    `num_ratios` upsampling blocks: conv, blocks (snake, transposed conv, 3 residual units), snake, conv."""
    pairs = [("model.0.", "conv1.")]
    for i in range(num_ratios):
        block = f"model.{i + 1}.block."
        pairs += [(block + "0.", f"block.{i}.snake1."), (block + "1.", f"block.{i}.conv_t1.")]
        for unit in range(3):
            inner = f"{block}{unit + 2}.block."
            ours = f"block.{i}.res_unit{unit + 1}."
            pairs += [(inner + "0.", ours + "snake1."), (inner + "1.", ours + "conv1."),
                      (inner + "2.", ours + "snake2."), (inner + "3.", ours + "conv2.")]
    return pairs + [(f"model.{num_ratios + 1}.", "snake1."), (f"model.{num_ratios + 2}.", "conv2.")]


def codec_names(state: dict[str, torch.Tensor], num_ratios: int, to_official: bool = False) -> dict[str, torch.Tensor]:
    """The codec's tensors with the decoder renamed official -> ours (or back); other keys kept, non-codec
    keys (the encoder's, the semantic model's) dropped."""
    pairs = [("decoder_2." + a, "decoder_2." + b) for a, b in decoder_names(num_ratios)]
    if to_official:
        pairs = [(b, a) for a, b in pairs]
    out = {}
    for key, value in state.items():
        if not key.startswith(CODEC_KEYS):
            continue
        old = next((a for a, _ in pairs if key.startswith(a)), None)
        new = dict(pairs)[old] + key[len(old):] if old is not None else key
        out[new] = value
    return out


def dac_encoder_names(num_ratios: int) -> list[tuple[str, str]]:
    """(official `encoder.block.*` prefix, transformers `DacEncoder` prefix) pairs: conv, blocks (3 residual
    units, snake, strided conv), snake, conv."""
    pairs = [("block.0.", "conv1.")]
    for i in range(num_ratios):
        block = f"block.{i + 1}.block."
        for unit in range(3):
            inner = f"{block}{unit}.block."
            ours = f"block.{i}.res_unit{unit + 1}."
            pairs += [(inner + "0.", ours + "snake1."), (inner + "1.", ours + "conv1."),
                      (inner + "2.", ours + "snake2."), (inner + "3.", ours + "conv2.")]
        pairs += [(block + "3.", f"block.{i}.snake1."), (block + "4.", f"block.{i}.conv1.")]
    return pairs + [(f"block.{num_ratios + 1}.", "snake1."), (f"block.{num_ratios + 2}.", "conv2.")]


def encoder_names(state: dict[str, torch.Tensor], num_ratios: int,
                  to_official: bool = False) -> dict[str, torch.Tensor]:
    """The voice encoder's tensors (acoustic and semantic encoders, `fc_prior`, the RVQ) with the acoustic encoder
    renamed official -> ours (or back), and HuBERT's old weight-norm names (`weight_g`/`weight_v`) as
    transformers' parametrization names."""
    pairs = [("encoder." + a, "encoder." + b) for a, b in dac_encoder_names(num_ratios)]
    if to_official:
        pairs = [(b, a) for a, b in pairs]
    out = {}
    for key, value in state.items():
        if not key.startswith(ENCODER_KEYS):
            continue
        old = next((a for a, _ in pairs if key.startswith(a)), None)
        key = dict(pairs)[old] + key[len(old):] if old is not None else key
        if key.startswith(SEMANTIC_PREFIX) and key.rsplit(".", 1)[-1] in OLD_WEIGHT_NORM:
            base, suffix = key.rsplit(".", 1)
            key = f"{base}.{OLD_WEIGHT_NORM[suffix]}"
        out[key] = value
    return out
