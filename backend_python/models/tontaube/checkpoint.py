"""TontaubeV1 checkpoints in the official bundle's layout (`TontaubeAI/TontaubeV1`):

    cb0/ … cb3/       one folder per codebook's model: a Qwen3 `config.json` with the TontaubeV1 fields
                      (config.py), `model.safetensors` (transformers' names: `model.embed_tokens`,
                      `model.layers.N.*`, `model.norm`, `audio_head.fc1`, `audio_head.fc2`), `tokenizer.json`
    voices.safetensors  ours: each preset voice's codes [4, frames] (the official bundle encodes its voices
                      from audio at start-up; a bundle without this file has no preset voice here)
    dualcodec/        the official `dualcodec_12hz_16384_4096.safetensors` and `w2vbert2_mean_var_stats_emilia.pt`
                      (codec.py, voice_encoder.py)
    vibevoice/        VibeVoice-1.5B's acoustic tokenizer, optional (vibevoice.py)
    w2v-bert-2.0/     facebook/w2v-bert-2.0, for cloning a voice from audio (voice_encoder.py)
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .config import NUM_CODEBOOKS, PredictorConfig, TokenIds, TontaubeConfig
from .description import FOLDERS

CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, VOICES_FILE = "config.json", "model.safetensors", "tokenizer.json", \
    "voices.safetensors"
_QWEN3_FIELDS = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "intermediate_size": "intermediate_size",
                 "num_hidden_layers": "num_hidden_layers", "num_attention_heads": "num_attention_heads",
                 "num_key_value_heads": "num_key_value_heads", "head_dim": "head_dim",
                 "audio_head_hidden": "audio_head_hidden", "rms_norm_eps": "rms_norm_eps",
                 "max_position_embeddings": "max_position_embeddings"}


def read_config(path: Path) -> TontaubeConfig:
    predictors, ids = [], None
    for k, folder in enumerate(FOLDERS):
        d = json.loads((path / folder / CONFIG_FILE).read_text())
        if int(d.get("target_codebook", -1)) != k or int(d.get("chunk_realign_offset", 25)) != 25:
            raise ValueError(f"{folder}/{CONFIG_FILE}: not TontaubeV1's cb{k} model (target_codebook "
                             f"{d.get('target_codebook')}, chunk_realign_offset {d.get('chunk_realign_offset')})")
        ids = ids or TokenIds(dc_base=d["audio_token_start_id"], pad=d["pad_token_id"], eos=d["eos_token_id"],
                              text_marker=d["text_marker_token_id"], audio_marker=d["audio_marker_token_id"])
        theta = (d.get("rope_parameters") or {}).get("rope_theta", d.get("rope_theta", 1_000_000.0))
        fields = {ours: d[theirs] for ours, theirs in _QWEN3_FIELDS.items() if theirs in d}
        predictors.append(PredictorConfig(target_codebook=k, rope_theta=float(theta), **fields))
    return TontaubeConfig(ids, tuple(predictors))


def config_dict(config: TontaubeConfig, k: int) -> dict:
    p, ids = config.predictors[k], config.ids
    return {"architectures": ["Qwen3DualCodecForCausalLM"], "model_type": "qwen3",
            **{theirs: getattr(p, ours) for ours, theirs in _QWEN3_FIELDS.items()},
            "rope_theta": p.rope_theta, "tie_word_embeddings": False, "attention_bias": False,
            "audio_token_start_id": ids.dc_base, "n_codebooks": NUM_CODEBOOKS, "target_codebook": k,
            "pad_token_id": ids.pad, "eos_token_id": ids.eos, "audio_marker_token_id": ids.audio_marker,
            "text_marker_token_id": ids.text_marker, "chunk_realign_offset": 25}


def read_weights(path: Path, k: int) -> dict[str, torch.Tensor]:
    return load_file(str(path / FOLDERS[k] / WEIGHTS_FILE))


def read_voices(path: Path) -> dict[str, torch.Tensor]:
    file = path / VOICES_FILE
    return load_file(str(file)) if file.is_file() else {}


def write(path: Path, config: TontaubeConfig, states: list[dict[str, torch.Tensor]], tokenizer,
          voices: dict[str, torch.Tensor]) -> None:
    for k, folder in enumerate(FOLDERS):
        (path / folder).mkdir(parents=True, exist_ok=True)
        (path / folder / CONFIG_FILE).write_text(json.dumps(config_dict(config, k), indent=1))
        save_file({name: t.contiguous() for name, t in states[k].items()}, str(path / folder / WEIGHTS_FILE))
        tokenizer.save(str(path / folder / TOKENIZER_FILE))
    save_file({name: t.contiguous() for name, t in voices.items()}, str(path / VOICES_FILE))

