"""Checkpoint I/O in the transformers Llama layout, and the tiny checkpoint builder.

A checkpoint dir holds config.json (model_type `llama`, an Orpheus vocabulary), model.safetensors
or model.safetensors.index.json + shards (`model.*`, `lm_head.*`), the Llama-3 tokenizer files
(tokenizer.json), and optionally `snac/`: the SNAC codec (config.json + pytorch_model.bin or
model.safetensors). Official Orpheus repos carry no codec; then SNAC 24 kHz comes from the
Hugging Face cache (`codec.py`).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..qwen3_tts.checkpoint import init_random_weights, weight_files
from .config import OrpheusConfig

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
HEAD_KEY = "lm_head.weight"

TINY_BPE_SPECIALS = ["<|begin_of_text|>", "<|eot_id|>"]
TINY_BPE_CORPUS = ["tara leah jess leo dan mia zac zoe: "] * 20 + [
    "The quick brown fox jumps over the lazy dog.",
    "Get the trust fund to the bank early.",
    "Hello world, this is a tiny tokenizer for testing text to speech.",
]
TINY_BPE_VOCAB_SIZE = 400

__all__ = ["init_random_weights", "read_config", "load_tokenizer", "read_state_dict", "save_checkpoint",
           "build_tiny_tokenizer"]


def read_config(path: str | Path) -> OrpheusConfig:
    return OrpheusConfig.from_json_file(Path(path) / CONFIG_FILE)


def load_tokenizer(path: str | Path):
    """The checkpoint's fast tokenizer (Llama-3's tokenizer.json for real checkpoints)."""
    from transformers import PreTrainedTokenizerFast  # heavy import, only when loading

    return PreTrainedTokenizerFast.from_pretrained(str(path))


def read_state_dict(path: str | Path, config: OrpheusConfig) -> dict[str, torch.Tensor]:
    """`model.*` (and an untied `lm_head.*`) tensors, on CPU in their stored dtype. A tied checkpoint
    may still store `lm_head.weight` (a copy of the embeddings): it is dropped."""
    state: dict[str, torch.Tensor] = {}
    for file in weight_files(path):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            state.update({k: f.get_tensor(k) for k in f.keys() if k.startswith(("model.", "lm_head."))})
    if config.tie_word_embeddings:
        state.pop(HEAD_KEY, None)
    if not state:
        raise ValueError(f"no model.* weights in {path}")
    return state


def save_checkpoint(lm, out_dir: str | Path) -> None:
    """Write config.json, model.safetensors and the tokenizer files of an `OrpheusLM`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CONFIG_FILE).write_text(json.dumps(lm.config.to_dict(), indent=2))
    state = {k: v.detach().to("cpu").contiguous() for k, v in lm.backbone.state_dict().items()}
    save_file(state, str(out_dir / WEIGHTS_FILE), metadata={"format": "pt"})
    lm.tokenizer.save_pretrained(str(out_dir))


def build_tiny_tokenizer():
    """A byte-level BPE trained offline on a few sentences; like Llama-3's, it prepends <|begin_of_text|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TINY_BPE_VOCAB_SIZE, special_tokens=TINY_BPE_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(TINY_BPE_CORPUS, trainer)
    bos = TINY_BPE_SPECIALS[0]
    bpe.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=bos, eos_token=TINY_BPE_SPECIALS[1],
                                   pad_token=TINY_BPE_SPECIALS[1])


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a complete random-weight tiny checkpoint (LM + tokenizer + snac/), deterministic in seed."""
    from .codec import SNAC_DIR, build_codec_checkpoint
    from .lm import OrpheusLM
    from .presets import tiny, tiny_snac

    lm = OrpheusLM.from_config(tiny(), device="cpu", dtype=torch.float32, seed=seed, tokenizer=build_tiny_tokenizer())
    save_checkpoint(lm, out_dir)
    build_codec_checkpoint(tiny_snac(), Path(out_dir) / SNAC_DIR, seed=seed)
    return Path(out_dir)
