"""The tiny checkpoint: random weights of the `tiny` preset written in the official layout, so tests
and the e2e server load it like a real one (`checkpoint.py` reads it back)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from safetensors.torch import save_file

from ..checkpoint_io import CONFIG_FILE, WEIGHTS_FILE, cpu_state, read_state_dict, write_checkpoint
from .checkpoint import SPEECH_TOKENIZER_DIR
from .codec import build_tiny_codec_checkpoint
from .codec_encoder import tiny_codec_encoder_config
from .lm import Qwen3TTSLM
from .presets import TINY_TEXT_SPECIAL_IDS, build_tiny_tokenizer, tiny, tiny_base
from .voice_encoder import Qwen3TTSVoiceEncoder


def save_checkpoint(lm: Qwen3TTSLM, out_dir: str | Path, extra: dict[str, torch.Tensor] | None = None) -> None:
    """Write config.json, model.safetensors (the LM's tensors plus `extra`) and the tokenizer files."""
    write_checkpoint(out_dir, lm.config.to_dict(), cpu_state({**lm.state_dict(), **(extra or {})}), lm.tokenizer)


def build_tiny_checkpoint(out_dir: str | Path, seed: int = 0, is_base: bool = False) -> Path:
    """Write a complete random-weight tiny checkpoint (LM + tokenizer + speech_tokenizer/), deterministic in seed;
    `is_base`: the Base model, with a speaker encoder and the codec's encoder."""
    tokenizer = build_tiny_tokenizer()
    config = tiny_base() if is_base else tiny()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in TINY_TEXT_SPECIAL_IDS}
    if ids != TINY_TEXT_SPECIAL_IDS or len(tokenizer) > config.talker.text_vocab_size:
        raise RuntimeError(f"tiny tokenizer drifted from the preset: {ids}, {len(tokenizer)} tokens")
    lm = Qwen3TTSLM.from_config(config, device="cpu", dtype=torch.float32, seed=seed, tokenizer=tokenizer)
    codec_dir = Path(out_dir) / SPEECH_TOKENIZER_DIR
    if not is_base:
        save_checkpoint(lm, out_dir)
        build_tiny_codec_checkpoint(codec_dir, seed=seed)
        return Path(out_dir)
    voice = Qwen3TTSVoiceEncoder.from_config(config.speaker_encoder, tiny_codec_encoder_config(), seed=seed + 1)
    save_checkpoint(lm, out_dir, voice.speaker_state())
    build_tiny_codec_checkpoint(codec_dir, seed=seed)
    add_codec_encoder(codec_dir, voice)
    return Path(out_dir)


def add_codec_encoder(codec_dir: Path, voice: Qwen3TTSVoiceEncoder) -> None:
    """Put the voice encoder's codec encoder (config and `encoder.*` tensors) beside a speech tokenizer's decoder."""
    config = json.loads((codec_dir / CONFIG_FILE).read_text())
    config.update(encoder_config=voice.encoder.cfg.to_official(),
                  encoder_valid_num_quantizers=voice.encoder.cfg.valid_num_quantizers)
    (codec_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    state = {**read_state_dict(codec_dir, lambda k: True), **cpu_state(voice.codec_state())}
    save_file(state, str(codec_dir / WEIGHTS_FILE), metadata={"format": "pt"})
