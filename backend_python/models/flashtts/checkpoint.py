"""Our FlashTTS checkpoint directory, read and written (the tiny builder is `tiny.py`).

config.json (model_type flashtts, `FlashTTSConfig`), model.safetensors (the LM under FlashTTS's llm.pt names), the
tokenizer files, voices.safetensors (voice name -> [320] float32: speaker embedding, then reference embedding) and
`codec/` (`FlashTTSCodec.save_pretrained`). FlashTTS's own release (llm.pt with a cosyvoice2_mtpN.yaml, the
mean-flow and HiFi-GAN checkpoints) carries the same names (`codec.flashtts_state` maps the codec's); reading its
directory directly is not done here.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from protocol.quoting import quoted

from .. import checkpoint_io
from ..checkpoint_io import CONFIG_FILE, cpu_state, write_checkpoint
from .config import FlashTTSConfig

VOICES_FILE = "voices.safetensors"
CODEC_DIR = "codec"
UNUSED_KEYS = ("llm.model.lm_head.weight",)  # Qwen2's tied text head in llm.pt: the speech LM reads llm_decoder


def read_config(path: str | Path) -> FlashTTSConfig:
    return FlashTTSConfig.from_dict(json.loads((Path(path) / CONFIG_FILE).read_text()))


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The LM's tensors under FlashTTS's names, on the CPU in their stored dtype."""
    state = checkpoint_io.read_state_dict(path, lambda k: k not in UNUSED_KEYS)
    return {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}


def load_tokenizer(path: str | Path):
    """The saved tokenizer (not AutoTokenizer: it would read config.json, which is no transformers config)."""
    from transformers import PreTrainedTokenizerFast  # heavy import, only when loading

    return PreTrainedTokenizerFast.from_pretrained(str(path))


def read_voices(path: str | Path) -> dict[str, torch.Tensor]:
    """Voice name -> [speaker | reference] embedding float32, in the file's order (none without the file)."""
    file = Path(path) / VOICES_FILE
    return {name: v.reshape(-1).float() for name, v in load_file(str(file)).items()} if file.is_file() else {}


def save_checkpoint(lm, out_dir: str | Path) -> None:
    """Write config.json, model.safetensors, the tokenizer files and voices.safetensors of a `FlashTTSLM`."""
    write_checkpoint(out_dir, lm.config.to_dict(), cpu_state(lm.state_dict()), lm.tokenizer)
    save_file({name: v.detach().cpu().float().contiguous() for name, v in lm.voice_vectors.items()},
              str(Path(out_dir) / VOICES_FILE), metadata={"format": "pt"})


def check_voices(config: FlashTTSConfig, voices: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The voices, one [condition_dim] per name of the config, in its order, on the CPU."""
    if set(voices) != set(config.voices):
        raise ValueError(f"voice embeddings {sorted(voices)} do not match the config's voices {list(config.voices)}")
    for name, v in voices.items():
        if tuple(v.shape) != (config.condition_dim,):
            raise ValueError(f"voice {quoted(name)}: embedding of shape {list(v.shape)}, need [{config.condition_dim}]")
    return {name: voices[name].detach().to("cpu", torch.float32) for name in config.voices}


def random_voices(config: FlashTTSConfig, seed: int) -> dict[str, torch.Tensor]:
    """Deterministic random voices: N(0, 1) entries (a CAMPPlus x-vector's norm is ~10-20; 192 entries give ~14)."""
    generator = torch.Generator().manual_seed(seed + 2)
    return {name: torch.randn(config.condition_dim, generator=generator, device="cpu") for name in config.voices}


def codec_dir(path: str | Path) -> Path:
    return Path(path) / CODEC_DIR
