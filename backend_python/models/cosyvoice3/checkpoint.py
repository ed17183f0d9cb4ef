"""Reading CosyVoice 3 checkpoints, ours and the official directory, through one set of functions (the tiny
builder and writer are `tiny.py`).

Ours: config.json (model_type cosyvoice3, the LM config), model.safetensors (the LM under the official
llm.pt names), the tokenizer files, voices.safetensors (voice name -> [192] float32 speaker embedding),
`codec/` (the codec's own save_pretrained) and `campplus/` (the voice encoder's).

Official (Fun-CosyVoice3-0.5B): cosyvoice3.yaml (hyperpyyaml, read as plain YAML: the LM's speech sizes),
llm.pt (a torch state dict with the same names, plus the unused tied text head `llm.model.lm_head.weight`),
CosyVoice-BlankEN/ (the Qwen2 config.json and tokenizer, to which CosyVoice 3's special tokens are added as
the reference does), flow.pt and hift.pt (the codec reads them from the directory itself), campplus.onnx, and spk2info.pt
(optional: speaker name -> {"embedding": [1, 192], ...}) for preset voices.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .. import checkpoint_io
from ..checkpoint_io import CONFIG_FILE
from ..layers.qwen2 import Qwen2Config
from .config import FRAME_RATE, SPEAKER_EMBEDDING_DIM, SPEECH_TOKEN_SIZE, CosyVoice3Config
from .description import MODEL_TYPE, OFFICIAL_LLM, OFFICIAL_YAML, is_official, is_ours
from .presets import add_special_tokens

VOICES_FILE = "voices.safetensors"
CODEC_DIR = "codec"
VOICE_ENCODER_DIR = "campplus"
OFFICIAL_TEXT_LM_DIR = "CosyVoice-BlankEN"
OFFICIAL_SPEAKERS = "spk2info.pt"
UNUSED_KEYS = ("llm.model.lm_head.weight",)  # Qwen2's tied text head: the speech LM reads llm_decoder


def read_config(path: str | Path) -> CosyVoice3Config:
    path = Path(path)
    if is_ours(path):
        return CosyVoice3Config.from_dict(json.loads((path / CONFIG_FILE).read_text()))
    if is_official(path):
        return official_config(path)
    raise ValueError(f"{path} is not a CosyVoice 3 checkpoint (no config.json of model_type {MODEL_TYPE!r}, "
                     f"no {OFFICIAL_YAML} with {OFFICIAL_LLM})")


def official_config(path: Path) -> CosyVoice3Config:
    """The LM config of an official directory: speech sizes from cosyvoice3.yaml, the Qwen2 shape from
    CosyVoice-BlankEN/config.json, voices from spk2info.pt (none without it)."""
    from .codec import read_hyperpyyaml  # the codec reads the same yaml (its `flow` and `hift`)

    yaml_config = read_hyperpyyaml((path / OFFICIAL_YAML).read_text())
    llm = yaml_config.get("llm") or {}
    qwen2 = Qwen2Config.from_dict(json.loads((path / OFFICIAL_TEXT_LM_DIR / CONFIG_FILE).read_text()))
    if int(llm.get("llm_input_size", qwen2.hidden_size)) != qwen2.hidden_size:
        raise ValueError(f"{path / OFFICIAL_YAML}: llm_input_size {llm['llm_input_size']} != the Qwen2 hidden "
                         f"size {qwen2.hidden_size}")
    return CosyVoice3Config(llm=qwen2, speech_token_size=int(llm.get("speech_token_size", SPEECH_TOKEN_SIZE)),
                            speaker_embedding_dim=int(yaml_config.get("spk_embed_dim", SPEAKER_EMBEDDING_DIM)),
                            frame_rate=float(yaml_config.get("token_frame_rate", FRAME_RATE)),
                            voices=tuple(read_voices(path)))


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The LM's tensors under the official names, on the CPU in their stored dtype."""
    path = Path(path)
    if is_official(path):
        state = torch.load(path / OFFICIAL_LLM, map_location="cpu", weights_only=True, mmap=True)
    else:
        state = checkpoint_io.read_state_dict(path, lambda k: True)
    return {k: v for k, v in state.items() if k not in UNUSED_KEYS and not k.endswith("rotary_emb.inv_freq")}


def load_tokenizer(path: str | Path):
    """Ours: the saved tokenizer (its special tokens included). Official: CosyVoice-BlankEN's, with CosyVoice 3's
    special tokens added in the reference's order (so <|endofprompt|> gets the id the model was trained on)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast  # heavy import, only when loading

    path = Path(path)
    if is_ours(path):  # not AutoTokenizer: it would read config.json, which is no transformers config
        return PreTrainedTokenizerFast.from_pretrained(str(path))
    tokenizer = AutoTokenizer.from_pretrained(str(path / OFFICIAL_TEXT_LM_DIR))
    add_special_tokens(tokenizer)
    return tokenizer


def read_voices(path: str | Path) -> dict[str, torch.Tensor]:
    """Voice name -> speaker embedding [192] float32, in the checkpoint's order (none where it has none)."""
    path = Path(path)
    if (path / VOICES_FILE).is_file():
        return {name: v.reshape(-1).float() for name, v in load_file(str(path / VOICES_FILE)).items()}
    if (path / OFFICIAL_SPEAKERS).is_file():
        speakers = torch.load(path / OFFICIAL_SPEAKERS, map_location="cpu", weights_only=True)
        return {name: info["embedding"].reshape(-1).float() for name, info in speakers.items() if "embedding" in info}
    return {}


def write_voices(voices: dict[str, torch.Tensor], out_dir: str | Path) -> None:
    save_file({name: v.detach().cpu().float().contiguous() for name, v in voices.items()},
              str(Path(out_dir) / VOICES_FILE), metadata={"format": "pt"})


def codec_dir(path: str | Path) -> Path:
    """Where the codec's weights are: our `codec/`, or an official directory itself (flow.pt, hift.pt)."""
    path = Path(path)
    return path if is_official(path) else path / CODEC_DIR


def voice_encoder_dir(path: str | Path) -> Path:
    """Where CAMPPlus's weights are: our `campplus/`, or an official directory itself (campplus.onnx)."""
    path = Path(path)
    return path if is_official(path) else path / VOICE_ENCODER_DIR

