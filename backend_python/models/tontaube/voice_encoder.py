"""`TontaubeVoiceEncoder`: reference audio (up to 60 s) -> the voice-prompt codes TontaubeV1 clones a voice from.

As the reference encodes its voice prompts (`encode_voice_prompt`: DualCodec's `encode` with 4 quantizers): w2v-BERT
2.0's features of the audio (`SemanticFeatures`: its 17th layer, normalised, pooled to 12.5 Hz) and the audio itself
through DualCodec's encoder give the semantic code and three acoustic codes a frame (`ref_codes` [F, 4]). The
voice is the codes alone: the reference's transcript is not used and `x_vector_only` changes nothing (the
model has no speaker embedding). Each reference is encoded alone (its features span the whole clip).
"""
from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

import torch

from ..base import VoiceEncoder
from .config import NUM_CODEBOOKS, SAMPLE_RATE, codebook_size
from .dualcodec_encoder import (DualCodecEncoder, DualCodecEncoderConfig, SemanticFeatures, encoder_state,
                                semantic_frames)

W2V_BERT_DIR = "w2v-bert-2.0"  # facebook/w2v-bert-2.0 (config.json, model.safetensors, preprocessor_config.json)
STATS_FILE = "w2vbert2_mean_var_stats_emilia.pt"  # in dualcodec/, as amphion/dualcodec ships it
ENCODER_CONFIG = "voxlane_encoder.json"  # in dualcodec/: ours, the encoder's shape and the feature layer

REF_CODES = "ref_codes"  # the VoiceReference tensor: [frames, 4] int64


class TontaubeVoiceEncoder(VoiceEncoder):
    def __init__(self, features: SemanticFeatures, encoder: DualCodecEncoder) -> None:
        super().__init__()
        self.features, self.encoder = features.eval(), encoder.eval()
        self.reference_tensors = {REF_CODES: ("INT64", [-1, NUM_CODEBOOKS])}
        self.code_limits = tuple(codebook_size(k) for k in range(NUM_CODEBOOKS))
        self.in_context_needs_text = False  # its prompt holds the reference's codes alone

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE

    @torch.inference_mode()
    def encode(self, audio: list[torch.Tensor], x_vector_only: list[bool]) -> list[dict[str, torch.Tensor]]:
        self.check_flags(audio, x_vector_only)
        return [{REF_CODES: self._codes(a)} for a in audio]

    def _codes(self, audio: torch.Tensor) -> torch.Tensor:
        if audio.dim() != 1 or semantic_frames(audio.numel()) < 1:
            raise ValueError(f"reference audio must be mono [N] of at least one frame at {SAMPLE_RATE} Hz, got "
                             f"{tuple(audio.shape)}")
        wav = audio.to(self.encoder_device, torch.float32)[None]
        semantic, acoustic = self.encoder.encode(wav, self.features(wav).to(self.encoder_device))
        return torch.cat((semantic[0, :, None], acoustic[0].T), dim=1).cpu()

    @property
    def encoder_device(self) -> torch.device:
        return next(self.encoder.parameters()).device


def load(path: Path, dualcodec_dir: str, weights: str, device="cpu") -> TontaubeVoiceEncoder:
    """From a checkpoint: `dualcodec/` (the official weights file, whose encode side this takes; the stats; our
    shape file, else the official `12hz_v1` and w2v-BERT's layer 17) and `w2v-bert-2.0/`."""
    from safetensors.torch import load_file
    folder = Path(path) / dualcodec_dir
    shape_file = folder / ENCODER_CONFIG
    shape = json.loads(shape_file.read_text()) if shape_file.is_file() else {}
    names = {f.name for f in fields(DualCodecEncoderConfig)}
    config = DualCodecEncoderConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in shape.items()
                                       if k in names})
    encoder = DualCodecEncoder(config)
    encoder.load_state_dict(encoder_state(load_file(str(folder / weights)), config.n_acoustic), strict=True)
    layer = {"output_layer": shape["output_layer"]} if "output_layer" in shape else {}
    features = SemanticFeatures.from_pretrained(Path(path) / W2V_BERT_DIR, folder / STATS_FILE, **layer)
    return TontaubeVoiceEncoder(features, encoder).to(device)


def save_tiny(path: Path, dualcodec_dir: str, weights: str, config: DualCodecEncoderConfig,
              decoder_state: dict, seed: int = 0) -> None:
    """A random encoder beside a checkpoint's decoder (the modules both hold take the decoder's weights, as one
    official file holds them once) and a tiny w2v-BERT (one layer of width 1,024) with random stats."""
    from safetensors.torch import save_file
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        encoder = DualCodecEncoder(config)
    encoder.load_state_dict(decoder_state, strict=False)
    folder = Path(path) / dualcodec_dir
    state = {**encoder.state_dict(), **decoder_state}
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / weights))
    features = SemanticFeatures.tiny(layers=1, output_layer=1, seed=seed)
    features.model.save_pretrained(Path(path) / W2V_BERT_DIR)
    features.feature_extractor.save_pretrained(Path(path) / W2V_BERT_DIR)
    torch.save({"mean": features.mean.clone(), "var": features.std.square()}, folder / STATS_FILE)
    (folder / ENCODER_CONFIG).write_text(json.dumps({**asdict(config), "output_layer": 1}))
