"""Safetensors checkpoint files shared by the families: finding, reading, writing, and the tiny BPE.

A checkpoint dir holds config.json, model.safetensors or model.safetensors.index.json + shards,
and the tokenizer files.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch
from safetensors import safe_open
from safetensors.torch import save_file

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
TINY_BPE_SENTENCES = (  # every family's tiny tokenizer trains on these, after its own special words
    "The quick brown fox jumps over the lazy dog.",
    "Get the trust fund to the bank early.",
    "Hello world, this is a tiny tokenizer for testing text to speech.",
)


def weight_files(path: str | Path) -> list[Path]:
    """The safetensors file(s) of a checkpoint dir, single or sharded."""
    path = Path(path)
    index = path / WEIGHTS_INDEX_FILE
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / shard for shard in shards]
    if not (path / WEIGHTS_FILE).exists():
        raise FileNotFoundError(f"no {WEIGHTS_FILE} or {WEIGHTS_INDEX_FILE} in {path}")
    return [path / WEIGHTS_FILE]


def read_state_dict(path: str | Path, keep: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint whose names pass `keep`, on CPU in their stored dtype."""
    state: dict[str, torch.Tensor] = {}
    for file in weight_files(path):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            state.update({k: f.get_tensor(k) for k in f.keys() if keep(k)})
    return state


def cpu_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict as contiguous CPU tensors, ready for `save_file`."""
    return {k: v.detach().to("cpu").contiguous() for k, v in state.items()}


def write_checkpoint(out_dir: str | Path, config: dict, state: dict[str, torch.Tensor], tokenizer) -> None:
    """Write config.json, model.safetensors (`state`, CPU tensors) and the tokenizer files."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    save_file(state, str(out_dir / WEIGHTS_FILE), metadata={"format": "pt"})
    tokenizer.save_pretrained(str(out_dir))


def train_byte_level_bpe(specials: list[str], corpus: list[str], vocab_size: int):
    """A byte-level BPE (a `tokenizers.Tokenizer`) trained offline on `corpus`, specials first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(corpus, trainer)
    return bpe
