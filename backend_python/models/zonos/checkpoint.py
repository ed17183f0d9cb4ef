"""Reading and writing Zonos checkpoint dirs.

The official layout (Zyphra/Zonos-v0.1-transformer): `config.json` and `model.safetensors` with the reference's
parameter names (`backbone.*`, `prefix_conditioner.*`, `embeddings.{0..8}`, `heads.{0..8}`). Ours adds two
optional parts: `voices.safetensors` (preset voices: name -> 128-d speaker embedding) and `dac/` (the codec, as
transformers' `DacModel.save_pretrained` writes it); without `dac/` the codec is `descript/dac_44khz` from the
local Hugging Face cache, as the reference loads it. The speaker model for cloning is `speaker_embedding/` (the two
official files of Zyphra/Zonos-v0.1-speaker-embedding, and our `config.json` where its shape is not the official
one), else that repo from the local Hugging Face cache; without either the model clones no voice.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..checkpoint_io import CONFIG_FILE, WEIGHTS_FILE, cpu_state, read_state_dict
from ..layers.empty_weights import empty_weights
from .config import EMBEDDING_ROWS, HEAD_COLUMNS, ZonosConfig

VOICES_FILE = "voices.safetensors"
DAC_DIR = "dac"
DAC_HF_ID = "descript/dac_44khz"
SPEAKER_DIR = "speaker_embedding"
SPEAKER_HF_ID = "Zyphra/Zonos-v0.1-speaker-embedding"
SPEAKER_FILE = "ResNet293_SimAM_ASP_base.pt"
LDA_FILE = "ResNet293_SimAM_ASP_base_LDA-128.pt"


def read_config(path: str | Path) -> ZonosConfig:
    return ZonosConfig.from_json_file(Path(path) / CONFIG_FILE)


def read_lm_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of model.safetensors; code tables cut back to the reference's rows (it pads them to a
    multiple of 8 on load, and a checkpoint saved after that holds the padding)."""
    state = read_state_dict(path, lambda k: True)
    if not state:
        raise ValueError(f"no Zonos weights in {path}")
    for key, value in state.items():
        if key.startswith("embeddings."):
            state[key] = value[:EMBEDDING_ROWS]
        if key.startswith("heads."):
            state[key] = value[:HEAD_COLUMNS]
    return state


def read_voices(path: str | Path) -> dict[str, torch.Tensor]:
    """Preset voices of the checkpoint (none in an official one)."""
    file = Path(path) / VOICES_FILE
    return {name: vector.float() for name, vector in load_file(str(file)).items()} if file.is_file() else {}


def write_checkpoint(out_dir: str | Path, config: ZonosConfig, state: dict[str, torch.Tensor],
                     voices: dict[str, torch.Tensor]) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CONFIG_FILE).write_text(json.dumps(config.to_dict(), indent=2))
    save_file(cpu_state(state), str(out_dir / WEIGHTS_FILE), metadata={"format": "pt"})
    if voices:
        save_file(cpu_state(voices), str(out_dir / VOICES_FILE))


def dac_dir(checkpoint: Path) -> Path:
    """The checkpoint's own `dac/`, else DAC 44 kHz from the local Hugging Face cache (no downloads)."""
    if (checkpoint / DAC_DIR).is_dir():
        return checkpoint / DAC_DIR
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(DAC_HF_ID, local_files_only=True))
    except Exception as exc:
        raise ValueError(f"{checkpoint} has no {DAC_DIR}/ and {DAC_HF_ID} is not in the Hugging Face cache "
                         f"(download it once, or copy it to {checkpoint / DAC_DIR}): {exc}") from None


def speaker_dir(checkpoint: Path) -> Path | None:
    """The checkpoint's own `speaker_embedding/`, else the official one from the local Hugging Face cache, else None."""
    if (checkpoint / SPEAKER_DIR / SPEAKER_FILE).is_file():
        return checkpoint / SPEAKER_DIR
    from huggingface_hub import snapshot_download

    try:
        path = Path(snapshot_download(SPEAKER_HF_ID, local_files_only=True))
    except Exception:  # not cached: this checkpoint clones no voice (family.load_voice_encoder says None)
        return None
    return path if (path / SPEAKER_FILE).is_file() else None


def read_speaker_model(path: Path):
    """The speaker model of a `speaker_embedding/` dir: ResNet + pooling + bottleneck, and the LDA."""
    from .speaker import SpeakerConfig, SpeakerEmbedding

    config_file = path / CONFIG_FILE
    config = SpeakerConfig.from_dict(json.loads(config_file.read_text())) if config_file.is_file() else SpeakerConfig()
    with empty_weights():
        model = SpeakerEmbedding(config)
    state = torch.load(path / SPEAKER_FILE, map_location="cpu", weights_only=True)
    state.update({f"lda.{k}": v for k, v in torch.load(path / LDA_FILE, map_location="cpu", weights_only=True).items()})
    model.load_state_dict(state, strict=True, assign=True)
    return model.float().eval()


def write_speaker_model(model, path: Path) -> None:
    """Both official files, and config.json with the model's shape."""
    path.mkdir(parents=True, exist_ok=True)
    state = cpu_state(model.state_dict())
    torch.save({k: v for k, v in state.items() if not k.startswith("lda.")}, path / SPEAKER_FILE)
    torch.save({k[len("lda."):]: v for k, v in state.items() if k.startswith("lda.")}, path / LDA_FILE)
    (path / CONFIG_FILE).write_text(json.dumps(model.config.to_dict(), indent=2))
