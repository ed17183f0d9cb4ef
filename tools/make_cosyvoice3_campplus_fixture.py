"""Build the golden fixture for CosyVoice 3's speaker encoder (CAM++) from the reference code.

Needs, besides our venv: 3D-Speaker's `speakerlab` (a checkout of modelscope/3D-Speaker: only
speakerlab/models/campplus/{DTDNN,layers}.py are imported, they need torch alone), `onnx` (for torch's ONNX
export; 1.17 works with our protobuf 4.25), `onnxruntime` and `kaldi-native-fbank`. From the repo root:

    PYTHONPATH=<3D-Speaker checkout>:<dir with onnx and kaldi_native_fbank> \\
        .venv/bin/python tools/make_cosyvoice3_campplus_fixture.py [OUT_DIR]

OUT_DIR defaults to tests/fixtures/cosyvoice3_campplus_tiny/. Our encoder's random weights
(`CampPlusEncoder.from_config(FIXTURE_CONFIG, seed=SEED)`) are loaded into 3D-Speaker's `CAMPPlus` (strict: the
names and shapes are checked here), which is exported to campplus.onnx as 3D-Speaker's
export_speaker_embedding_onnx.py does (opset 11, constant folding, eval: its post-conv BatchNorms folded), so
the file has the layout of CosyVoice's. FIXTURE_CONFIG differs from the full one only where 3D-Speaker's
constructor takes arguments (growth rate, bottleneck, TDNN channels). campplus.json carries it. golden.npz holds
CosyVoice's frontend run by independent code: a fixed waveform, its Kaldi fbank by kaldi-native-fbank, and the
embedding ONNX Runtime computes from that fbank less its mean.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import kaldi_native_fbank as knf  # noqa: E402
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from speakerlab.models.campplus.DTDNN import CAMPPlus  # noqa: E402

from backend_python.models.cosyvoice3.voice_encoder import (  # noqa: E402
    CONFIG_FILE, ONNX_FILE, CampPlusConfig, CampPlusEncoder)

SEED = 0
SAMPLE_RATE = 16000
NUM_SAMPLES = 52800  # 3.3 s: 328 fbank frames, 164 after the TDNN layer, so a whole and a partial segment
FIXTURE_CONFIG = dataclasses.replace(CampPlusConfig.full(), growth_rate=4, bn_size=2, init_channels=16)


def waveform() -> np.ndarray:
    """A voiced, vibrato, syllable-like signal plus a little noise: [NUM_SAMPLES] float32 in [-1, 1]."""
    rng = np.random.default_rng(SEED)
    t = np.arange(NUM_SAMPLES) / SAMPLE_RATE
    f0 = 120.0 + 15.0 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    voiced = sum(np.sin(k * phase) / k for k in range(1, 50) if k * f0.max() < 7000)
    syllables = 0.2 + 0.8 * np.sin(2 * np.pi * 2.5 * t) ** 2
    audio = 0.1 * voiced * syllables + 0.005 * rng.standard_normal(NUM_SAMPLES)
    return audio.astype(np.float32)


def kaldi_fbank(audio: np.ndarray) -> np.ndarray:
    """torchaudio.compliance.kaldi.fbank(num_mel_bins=80, dither=0, sample_frequency=16000)'s settings."""
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = SAMPLE_RATE
    opts.frame_opts.dither = 0.0
    opts.frame_opts.snip_edges = True
    opts.frame_opts.window_type = "povey"
    opts.frame_opts.remove_dc_offset = True
    opts.frame_opts.preemph_coeff = 0.97
    opts.mel_opts.num_bins = 80
    opts.mel_opts.low_freq = 20.0
    opts.mel_opts.high_freq = 0.0  # Nyquist
    opts.use_energy, opts.use_log_fbank, opts.use_power = False, True, True
    fbank = knf.OnlineFbank(opts)
    fbank.accept_waveform(SAMPLE_RATE, audio.tolist())
    fbank.input_finished()
    return np.stack([fbank.get_frame(i) for i in range(fbank.num_frames_ready)]).astype(np.float32)


def reference_model(ours: CampPlusEncoder) -> CAMPPlus:
    cfg = FIXTURE_CONFIG
    model = CAMPPlus(feat_dim=cfg.feat_dim, embedding_size=cfg.embedding_size, growth_rate=cfg.growth_rate,
                     bn_size=cfg.bn_size, init_channels=cfg.init_channels)
    model.load_state_dict(ours.campplus.state_dict(), strict=True)
    return model.eval()


def export(model: CAMPPlus, path: Path) -> None:
    torch.onnx.export(model, (torch.randn(1, 345, FIXTURE_CONFIG.feat_dim),), str(path), export_params=True,
                      opset_version=11, do_constant_folding=True, input_names=["feature"],
                      output_names=["embedding"], dynamo=False,
                      dynamic_axes={"feature": {0: "batch_size", 1: "frame_num"}, "embedding": {0: "batch_size"}})


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "tests/fixtures/cosyvoice3_campplus_tiny"
    out.mkdir(parents=True, exist_ok=True)
    ours = CampPlusEncoder.from_config(FIXTURE_CONFIG, seed=SEED)
    reference = reference_model(ours)
    export(reference, out / ONNX_FILE)
    (out / CONFIG_FILE).write_text(json.dumps(FIXTURE_CONFIG.to_dict(), indent=2))

    audio = waveform()
    fbank = kaldi_fbank(audio)
    feats = (fbank - fbank.mean(axis=0, keepdims=True))[None]  # CosyVoice's `feat - feat.mean(dim=0)`, [1, T, 80]
    session = ort.InferenceSession(str(out / ONNX_FILE), providers=["CPUExecutionProvider"])
    embedding = session.run(None, {"feature": feats})[0][0]
    with torch.no_grad():
        torch_embedding = reference(torch.from_numpy(feats))[0].numpy()
    np.savez(out / "golden.npz", waveform=audio, fbank=fbank, embedding=embedding)
    meta = {"seed": SEED, "sample_rate": SAMPLE_RATE, "num_frames": int(fbank.shape[0]),
            "onnxruntime": ort.__version__, "kaldi_native_fbank": getattr(knf, "__version__", "?"),
            "torch": torch.__version__,
            "onnxruntime_vs_torch_max_abs": float(np.abs(embedding - torch_embedding).max()),
            "embedding_norm": float(np.linalg.norm(embedding))}
    (out / "golden.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
