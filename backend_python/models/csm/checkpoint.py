"""Checkpoint I/O in the official `CsmForConditionalGeneration` layout, random init, and the tiny
checkpoint builder.

Layout of a checkpoint dir: config.json (model_type `csm`, with `depth_decoder_config` and
`codec_config`), model.safetensors or model.safetensors.index.json + shards (LM keys at the root,
Mimi under `codec_model.*`), and the Llama-3 tokenizer files.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from ..qwen3_tts.checkpoint import weight_files
from ..qwen3_tts.layers import RMSNorm
from .config import CsmConfig

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CODEC_PREFIX = "codec_model."
BACKBONE_AUDIO_TABLE = "backbone_model.embed_tokens.embed_audio_tokens.weight"
DEPTH_AUDIO_TABLE = "depth_decoder.model.embed_tokens.weight"

TINY_BOS, TINY_EOS = "<|begin_of_text|>", "<|end_of_text|>"
TINY_BPE_SPECIALS = [TINY_BOS, TINY_EOS]
TINY_BPE_CORPUS = ["[0][1][2][3] "] * 50 + [
    "The quick brown fox jumps over the lazy dog.",
    "Get the trust fund to the bank early.",
    "Hello world, this is a tiny tokenizer for testing text to speech.",
]
TINY_BPE_VOCAB_SIZE = 400


def read_config(path: str | Path) -> CsmConfig:
    return CsmConfig.from_json_file(Path(path) / CONFIG_FILE)


def load_tokenizer(path: str | Path):
    """The checkpoint's tokenizer (tokenizer.json); its post-processor adds the BOS/EOS CSM was trained with."""
    from transformers import PreTrainedTokenizerFast  # heavy import, only when loading

    return PreTrainedTokenizerFast.from_pretrained(str(path))


def read_state_dict(path: str | Path, keep) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint whose names pass `keep`, on CPU in their stored dtype."""
    state: dict[str, torch.Tensor] = {}
    for file in weight_files(path):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            state.update({k: f.get_tensor(k) for k in f.keys() if keep(k)})
    return state


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


@torch.no_grad()
def init_random_weights(model: nn.Module, seed: int) -> None:
    """Deterministic init in module order: N(0, 1/fan_in) matrices, N(0, 1) embeddings, unit norms.
    Unit-scale activations (unlike HF's N(0, 0.02)) make a random model's output depend on its prompt."""
    from .depth_decoder import CodebooksHead

    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.weight.normal_(0.0, module.in_features ** -0.5, generator=generator)
        if isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, 1.0, generator=generator)
        if isinstance(module, CodebooksHead):
            module.weight.normal_(0.0, module.weight.shape[1] ** -0.5, generator=generator)
        if isinstance(module, RMSNorm):
            module.weight.fill_(1.0)


def build_tiny_tokenizer():
    """A byte-level BPE trained offline on a few sentences, adding BOS and EOS like CSM's Llama-3 tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TINY_BPE_VOCAB_SIZE, special_tokens=TINY_BPE_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(TINY_BPE_CORPUS, trainer)
    bos, eos = bpe.token_to_id(TINY_BOS), bpe.token_to_id(TINY_EOS)
    bpe.post_processor = processors.TemplateProcessing(
        single=f"{TINY_BOS} $A {TINY_EOS}", special_tokens=[(TINY_BOS, bos), (TINY_EOS, eos)])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=TINY_BOS, eos_token=TINY_EOS,
                                   pad_token=TINY_EOS)


def save_checkpoint(lm, codec_state: dict[str, torch.Tensor], out_dir: str | Path) -> None:
    """Write config.json, model.safetensors (LM keys + `codec_model.*`) and the tokenizer files."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CONFIG_FILE).write_text(json.dumps(lm.config.to_dict(), indent=2))
    state = {k: v.detach().to("cpu").contiguous() for k, v in lm.state_dict().items()}
    state[DEPTH_AUDIO_TABLE] = state[DEPTH_AUDIO_TABLE].clone()  # safetensors refuses shared storage
    state.update({CODEC_PREFIX + k: v.detach().to("cpu").contiguous() for k, v in codec_state.items()})
    save_file(state, str(out_dir / WEIGHTS_FILE), metadata={"format": "pt"})
    lm.tokenizer.save_pretrained(str(out_dir))


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
