"""`CampPlusEncoder`: reference audio -> the CAM++ speaker embedding CosyVoice conditions its flow decoder on.

CosyVoice's frontend (`_extract_spk_embedding`): 16 kHz audio, Kaldi fbank less its utterance mean (fbank.py),
campplus.onnx -> [192]. Ours runs the same network in torch (campplus.py), batched over the references of a
call however their lengths differ. The serving lane resamples to `sample_rate` before `encode`.

A checkpoint dir holds either our files, campplus.json (the config) and campplus.safetensors (3D-Speaker's
tensor names: a converted official state dict loads as it is), or CosyVoice's campplus.onnx, read without the
`onnx` package (campplus_onnx.py), with the full config unless a campplus.json says otherwise.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from ..base import VoiceEncoder
from ..checkpoint_io import cpu_state
from ..layers.empty_weights import empty_weights
from ..onnx_io import read_onnx
from .campplus import TDNN_STRIDE, CampPlus, CampPlusConfig
from .campplus_onnx import BATCHNORMS, CONVS, campplus_state_from_onnx
from .fbank import frame_sizes, mel_banks, utterance_features

__all__ = ["CampPlusConfig", "CampPlusEncoder", "SPEAKER_EMBEDDING"]

CONFIG_FILE, WEIGHTS_FILE, ONNX_FILE = "campplus.json", "campplus.safetensors", "campplus.onnx"
SPEAKER_EMBEDDING = "speaker_embedding"  # the `VoiceReference.tensors` name
MIN_POOLED_FRAMES = 2  # the statistics pooling's unbiased std needs two frames


class CampPlusEncoder(VoiceEncoder):
    """`encode` -> {"speaker_embedding": [embedding_size] float32}, the same with or without x_vector_only: CAM++
    makes only the x-vector (the reference's speech tokens and mel, for cloning in context, are not its)."""

    def __init__(self, cfg: CampPlusConfig) -> None:
        super().__init__()
        self.config = cfg
        self.campplus = CampPlus(cfg)
        with torch.device("cpu"):  # float32 on the CPU whatever the model's dtype and device (not a buffer)
            self.mel_banks = mel_banks(cfg.feat_dim, cfg.sample_rate)
        self.reference_tensors = {SPEAKER_EMBEDDING: ("FP32", [cfg.embedding_size])}

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def min_samples(self) -> int:
        """The shortest audio whose fbank gives the pooling two frames after the TDNN layer halves them."""
        length, shift, _ = frame_sizes(self.sample_rate)
        min_frames = (MIN_POOLED_FRAMES - 1) * TDNN_STRIDE + 1
        return length + (min_frames - 1) * shift

    @property
    def dtype(self) -> torch.dtype:
        return self.campplus.xvector.dense.linear.weight.dtype

    @torch.inference_mode()
    def encode(self, audio: list[torch.Tensor], x_vector_only: list[bool]) -> list[dict[str, torch.Tensor]]:
        self.check_flags(audio, x_vector_only)
        if not audio:
            return []
        for a in audio:
            if a.dim() != 1 or a.numel() < self.min_samples:
                raise ValueError(f"reference audio must be mono [N] with N >= {self.min_samples} "
                                 f"({self.min_samples / self.sample_rate * 1000:.0f} ms), got {tuple(a.shape)}")
        embeddings = self.speaker_embeddings(audio)
        return [{SPEAKER_EMBEDDING: e} for e in embeddings.float().cpu()]

    def speaker_embeddings(self, audio: list[torch.Tensor]) -> torch.Tensor:
        """audio[i]: [N_i] float32 at `sample_rate` -> [B, embedding_size] (the fbank in float32, as CosyVoice's)."""
        banks = self.mel_banks.to(self.device)
        feats, lengths = utterance_features(audio, banks, self.sample_rate)  # [B, T, feat_dim] float32, [B]
        return self.campplus(feats.to(self.dtype), lengths)

    # ---- construction ----------------------------------------------------------------------------
    @classmethod
    def from_config(cls, cfg: CampPlusConfig, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                    seed: int = 0) -> "CampPlusEncoder":
        """Random weights and BatchNorm statistics, deterministic in `seed`."""
        model = cls(cfg)
        randomise(model.campplus, seed)
        return model.to(device=device, dtype=dtype).eval()

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "CampPlusEncoder":
        """Our campplus.safetensors, else CosyVoice's campplus.onnx. CosyVoice runs CAM++ in float32; a lower
        `dtype` moves the embedding (bfloat16: by 0.7% of its norm on the fixture's weights)."""
        path = Path(path)
        config_file = path / CONFIG_FILE
        cfg = CampPlusConfig.from_dict(json.loads(config_file.read_text())) if config_file.exists() \
            else CampPlusConfig.full()
        with empty_weights():
            model = cls(cfg)
        if (path / WEIGHTS_FILE).exists():
            with safe_open(str(path / WEIGHTS_FILE), framework="pt", device="cpu") as f:
                state = {k: f.get_tensor(k) for k in f.keys()}
        elif (path / ONNX_FILE).exists():
            state = campplus_state_from_onnx(model.campplus, read_onnx(path / ONNX_FILE))
        else:
            raise FileNotFoundError(f"no {WEIGHTS_FILE} or {ONNX_FILE} in {path}")
        state = {k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype) for k, v in state.items()}
        model.campplus.load_state_dict(state, strict=True, assign=True)
        return model.eval()

    def save_pretrained(self, path: str | Path) -> None:
        """campplus.json and campplus.safetensors (3D-Speaker's names), beside whatever else the dir holds."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / CONFIG_FILE).write_text(json.dumps(self.config.to_dict(), indent=2))
        save_file(cpu_state(self.campplus.state_dict()), str(path / WEIGHTS_FILE), metadata={"format": "pt"})


@torch.no_grad()
def randomise(net: nn.Module, seed: int) -> None:
    """He-normal conv weights, small biases, BatchNorm statistics and affines away from the identity (so that a
    BatchNorm folded into its conv changes the conv), drawn in module order."""
    generator = torch.Generator().manual_seed(seed)
    for module in net.modules():
        if isinstance(module, CONVS):
            module.weight.normal_(0.0, (2.0 / module.weight[0].numel()) ** 0.5, generator=generator)
            if module.bias is not None:
                module.bias.normal_(0.0, 0.1, generator=generator)
        elif isinstance(module, BATCHNORMS):
            module.running_mean.normal_(0.0, 0.1, generator=generator)
            module.running_var.uniform_(0.5, 1.5, generator=generator)
            if module.affine:
                module.weight.uniform_(0.5, 1.5, generator=generator)
                module.bias.normal_(0.0, 0.1, generator=generator)
