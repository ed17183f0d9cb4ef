"""Checkpoint I/O in the official `CsmForConditionalGeneration` layout, and the tiny checkpoint builder.

Layout of a checkpoint dir: config.json (model_type `csm`, with `depth_decoder_config` and
`codec_config`), model.safetensors or model.safetensors.index.json + shards (LM keys at the root,
Mimi under `codec_model.*`), and the Llama-3 tokenizer files.
"""
from __future__ import annotations

from pathlib import Path

import torch

# WEIGHTS_FILE: re-exported
from ..checkpoint_io import (CONFIG_FILE, TINY_BPE_SENTENCES, WEIGHTS_FILE, cpu_state, read_state_dict,
                             train_byte_level_bpe, write_checkpoint)
from .config import CsmConfig

CODEC_PREFIX = "codec_model."
BACKBONE_AUDIO_TABLE = "backbone_model.embed_tokens.embed_audio_tokens.weight"
DEPTH_AUDIO_TABLE = "depth_decoder.model.embed_tokens.weight"

TINY_BOS, TINY_EOS = "<|begin_of_text|>", "<|end_of_text|>"
TINY_BPE_SPECIALS = [TINY_BOS, TINY_EOS]
TINY_BPE_CORPUS = ["[0][1][2][3] "] * 50 + list(TINY_BPE_SENTENCES)
TINY_BPE_VOCAB_SIZE = 400


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


def build_tiny_tokenizer():
    """A byte-level BPE trained offline on a few sentences, adding BOS and EOS like CSM's Llama-3 tokenizer."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    bpe = train_byte_level_bpe(TINY_BPE_SPECIALS, TINY_BPE_CORPUS, TINY_BPE_VOCAB_SIZE)
    bos, eos = bpe.token_to_id(TINY_BOS), bpe.token_to_id(TINY_EOS)
    bpe.post_processor = processors.TemplateProcessing(
        single=f"{TINY_BOS} $A {TINY_EOS}", special_tokens=[(TINY_BOS, bos), (TINY_EOS, eos)])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=TINY_BOS, eos_token=TINY_EOS,
                                   pad_token=TINY_EOS)


def save_checkpoint(lm, codec_state: dict[str, torch.Tensor], out_dir: str | Path) -> None:
    """Write config.json, model.safetensors (LM keys + `codec_model.*`) and the tokenizer files."""
    state = cpu_state(lm.state_dict())
    state[DEPTH_AUDIO_TABLE] = state[DEPTH_AUDIO_TABLE].clone()  # safetensors refuses shared storage
    state.update({CODEC_PREFIX + k: v for k, v in cpu_state(codec_state).items()})
    write_checkpoint(out_dir, lm.config.to_dict(), state, lm.tokenizer)


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a complete random-weight tiny checkpoint (LM + Mimi + tokenizer), deterministic in seed."""
    from .codec import MimiCodec
    from .lm import CsmLM
    from .presets import tiny

    config, tokenizer = tiny(), build_tiny_tokenizer()
    if len(tokenizer) > config.text_vocab_size:
        raise RuntimeError(f"tiny tokenizer has {len(tokenizer)} tokens, over text_vocab_size {config.text_vocab_size}")
    lm = CsmLM.from_config(config, device="cpu", dtype=torch.float32, seed=seed, tokenizer=tokenizer)
    codec = MimiCodec.from_config(config.codec, seed=seed)
    save_checkpoint(lm, codec.model.state_dict(), out_dir)
    return Path(out_dir)
