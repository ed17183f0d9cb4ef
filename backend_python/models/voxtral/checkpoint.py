"""Reading and writing checkpoints in the official Voxtral-TTS layout (`mistralai/Voxtral-4B-TTS-2603`):

    params.json                 the config (config.py)
    consolidated.safetensors    every weight, Mistral's names
    tekken.json                 the text tokenizer (tokenizer.py)
    voice_embedding/{name}.pt   each preset voice's embedding rows [N, dim]

Backbone names are Mistral's (`layers.N.attention.wq`, `feed_forward.w1`, `attention_norm`,
`mm_audio_embeddings.tok_embeddings`, `norm`) and its RoPE rotates interleaved pairs (2i, 2i + 1); ours are
transformers' (`model.layers.N.self_attn.q_proj`, …) with RoPE on halves (i, i + d/2), so wq and wk rows are
permuted on the way in (transformers' own Mistral conversion) and back on the way out. The audio embedding
(`mm_audio_embeddings.audio_codebook_embeddings.embeddings`) and the flow head (`acoustic_transformer.*`) keep
their names; the codec is `audio_tokenizer.*` (codec.py). The text head is tied to the embedding and not used.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors import safe_open

from .config import BackboneConfig, VoxtralConfig

WEIGHTS_FILE = "consolidated.safetensors"
VOICES_DIR = "voice_embedding"
CODEC_PREFIX = "audio_tokenizer."
AUDIO_EMBEDDINGS = "mm_audio_embeddings.audio_codebook_embeddings.embeddings.weight"
RENAMES = (  # official (a regex) -> ours
    (r"^mm_audio_embeddings\.tok_embeddings\.weight$", "model.embed_tokens.weight"),
    (r"^" + re.escape(AUDIO_EMBEDDINGS) + "$", "audio_embeddings.weight"),
    (r"^layers\.(\d+)\.attention\.wq\.", r"model.layers.\1.self_attn.q_proj."),
    (r"^layers\.(\d+)\.attention\.wk\.", r"model.layers.\1.self_attn.k_proj."),
    (r"^layers\.(\d+)\.attention\.wv\.", r"model.layers.\1.self_attn.v_proj."),
    (r"^layers\.(\d+)\.attention\.wo\.", r"model.layers.\1.self_attn.o_proj."),
    (r"^layers\.(\d+)\.feed_forward\.w1\.", r"model.layers.\1.mlp.gate_proj."),
    (r"^layers\.(\d+)\.feed_forward\.w2\.", r"model.layers.\1.mlp.down_proj."),
    (r"^layers\.(\d+)\.feed_forward\.w3\.", r"model.layers.\1.mlp.up_proj."),
    (r"^layers\.(\d+)\.attention_norm\.", r"model.layers.\1.input_layernorm."),
    (r"^layers\.(\d+)\.ffn_norm\.", r"model.layers.\1.post_attention_layernorm."),
    (r"^norm\.", "model.norm."),
    (r"^(acoustic_transformer\..*)$", r"\1"),
)


def interleaved_to_halves(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """A q or k projection [heads · d, in] for interleaved-pair RoPE -> the same for half-split RoPE."""
    out_features, in_features = weight.shape
    head_dim = out_features // num_heads
    return weight.view(num_heads, head_dim // 2, 2, in_features).transpose(1, 2).reshape(out_features, in_features)


def halves_to_interleaved(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    out_features, in_features = weight.shape
    head_dim = out_features // num_heads
    return weight.view(num_heads, 2, head_dim // 2, in_features).transpose(1, 2).reshape(out_features, in_features)


def _heads(name: str, b: BackboneConfig) -> int | None:
    if name.endswith(("attention.wq.weight", "self_attn.q_proj.weight")):
        return b.n_heads
    if name.endswith(("attention.wk.weight", "self_attn.k_proj.weight")):
        return b.n_kv_heads
    return None


def read_config(path: str | Path) -> VoxtralConfig:
    return VoxtralConfig.from_dir(path)


def read_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    with safe_open(str(Path(path) / WEIGHTS_FILE), framework="pt", device="cpu") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def lm_state(official: dict[str, torch.Tensor], config: VoxtralConfig) -> dict[str, torch.Tensor]:
    """The LM's tensors under our names (wq and wk permuted); the codec's and the text head are left out."""
    state = {}
    for name, tensor in official.items():
        for pattern, replacement in RENAMES:
            if re.match(pattern, name):
                heads = _heads(name, config.backbone)
                state[re.sub(pattern, replacement, name)] = (
                    interleaved_to_halves(tensor, heads) if heads else tensor)
                break
    return state


def codec_state(official: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k[len(CODEC_PREFIX):]: v for k, v in official.items() if k.startswith(CODEC_PREFIX)}


def official_names(lm_state_dict: dict[str, torch.Tensor], codec_state_dict: dict[str, torch.Tensor],
                   config: VoxtralConfig) -> dict[str, torch.Tensor]:
    """Ours -> the official names (what `lm_state` and `codec_state` read back)."""
    inverse = {
        "model.embed_tokens.": "mm_audio_embeddings.tok_embeddings.",
        "audio_embeddings.": "mm_audio_embeddings.audio_codebook_embeddings.embeddings.",
        "model.norm.": "norm.",
    }
    layer_parts = {"self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk",
                   "self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo",
                   "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2",
                   "mlp.up_proj": "feed_forward.w3", "input_layernorm": "attention_norm",
                   "post_attention_layernorm": "ffn_norm"}
    out = {}
    for name, tensor in lm_state_dict.items():
        official = name
        for ours, theirs in inverse.items():
            if name.startswith(ours):
                official = theirs + name[len(ours):]
        match = re.match(r"^model\.layers\.(\d+)\.(.+)\.(weight)$", name)
        if match and match.group(2) in layer_parts:
            official = f"layers.{match.group(1)}.{layer_parts[match.group(2)]}.weight"
        heads = _heads(name, config.backbone)
        out[official] = halves_to_interleaved(tensor, heads) if heads else tensor
    out.update({CODEC_PREFIX + k: v for k, v in codec_state_dict.items()})
    return out


def read_voices(path: str | Path, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Each preset voice's embedding rows [N, dim] (float32); a voice without its file is an error that names it."""
    voices = {}
    for name in names:
        file = Path(path) / VOICES_DIR / f"{name}.pt"
        if not file.is_file():
            raise FileNotFoundError(f"preset voice {name!r} has no {VOICES_DIR}/{name}.pt in {path}")
        voices[name] = torch.load(str(file), map_location="cpu", weights_only=True).float()
    return voices


def write_voices(path: str | Path, voices: dict[str, torch.Tensor]) -> None:
    directory = Path(path) / VOICES_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for name, rows in voices.items():
        torch.save(rows.detach().cpu().clone(), str(directory / f"{name}.pt"))
