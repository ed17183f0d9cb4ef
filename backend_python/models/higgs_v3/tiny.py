"""The tiny checkpoint: random weights of the `tiny` preset written in the official layout (the LM as
`HiggsAudioModel` names it, the audio tokenizer in `audio_tokenizer/`), so tests and the e2e server load it
as a real one (`checkpoint.py` reads it back)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..checkpoint_io import cpu_state, write_checkpoint
from .checkpoint import TOKENIZER_DIR, VOICES_FILE, codec_names, encoder_names, official_lm_names
from .codec import HiggsTokenizerCodec
from .lm import HiggsV3LM
from .presets import build_tiny_tokenizer, tiny
from .voice_encoder import HiggsVoiceEncoder, hubert_config


def save_checkpoint(lm: HiggsV3LM, codec: HiggsTokenizerCodec, encoder: HiggsVoiceEncoder, out_dir: str | Path) -> None:
    """config.json, model.safetensors, the tokenizer files, voices.safetensors and audio_tokenizer/ (decoder and
    encoder)."""
    out_dir = Path(out_dir)
    write_checkpoint(out_dir, lm.config.to_dict(), official_lm_names(cpu_state(lm.state_dict())), lm.tokenizer)
    save_file(cpu_state(lm.voice_codes), str(out_dir / VOICES_FILE))
    codec_dir = out_dir / TOKENIZER_DIR
    codec_dir.mkdir(parents=True, exist_ok=True)
    (codec_dir / "config.json").write_text(json.dumps(codec.config.to_dict(), indent=2))
    num_ratios = len(codec.config.ratios)
    state = encoder_names(cpu_state(encoder.state_dict()), num_ratios, to_official=True)
    state.update(codec_names(cpu_state(codec.state_dict()), num_ratios, to_official=True))
    save_file(state, str(codec_dir / "model.safetensors"))


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a complete random-weight tiny checkpoint, deterministic in seed."""
    config, tokenizer = tiny(), build_tiny_tokenizer()
    if len(tokenizer) > config.backbone.vocab_size:
        raise RuntimeError(f"tiny tokenizer has {len(tokenizer)} tokens, over vocab_size {config.backbone.vocab_size}")
    lm = HiggsV3LM.from_config(config, device="cpu", dtype=torch.float32, seed=seed, tokenizer=tokenizer)
    codec = HiggsTokenizerCodec.from_config(config.tokenizer, seed=seed)
    encoder = HiggsVoiceEncoder.from_config(config.tokenizer, hubert_config(config.tokenizer), codec, seed=seed)
    save_checkpoint(lm, codec, encoder, out_dir)
    return Path(out_dir)
