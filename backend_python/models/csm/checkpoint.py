"""Reading checkpoints in the official `CsmForConditionalGeneration` layout (the tiny builder and
writer are `tiny.py`).

Layout of a checkpoint dir: config.json (model_type `csm`, with `depth_decoder_config` and
`codec_config`), model.safetensors or model.safetensors.index.json + shards (LM keys at the root,
Mimi under `codec_model.*`), and the Llama-3 tokenizer files.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint_io import CONFIG_FILE, read_state_dict
from .config import CsmConfig

CODEC_PREFIX = "codec_model."
BACKBONE_AUDIO_TABLE = "backbone_model.embed_tokens.embed_audio_tokens.weight"
DEPTH_AUDIO_TABLE = "depth_decoder.model.embed_tokens.weight"


def read_config(path: str | Path) -> CsmConfig:
    return CsmConfig.from_json_file(Path(path) / CONFIG_FILE)


def load_tokenizer(path: str | Path):
    """The checkpoint's tokenizer (tokenizer.json); its post-processor adds the BOS/EOS CSM was trained with."""
    from transformers import PreTrainedTokenizerFast  # heavy import, only when loading

    return PreTrainedTokenizerFast.from_pretrained(str(path))


def read_lm_state_dict(path: str | Path, config: CsmConfig) -> dict[str, torch.Tensor]:
    """Every non-codec tensor; a tied audio table stored once is filled in under both names."""
    state = read_state_dict(path, lambda k: not k.startswith(CODEC_PREFIX))
    if not state:
        raise ValueError(f"no CSM weights in {path}")
    if config.tie_codebooks_embeddings:
        table = state.get(BACKBONE_AUDIO_TABLE, state.get(DEPTH_AUDIO_TABLE))
        state.setdefault(BACKBONE_AUDIO_TABLE, table)
        state.setdefault(DEPTH_AUDIO_TABLE, table)
    return state
