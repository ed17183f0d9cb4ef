"""Build tests/fixtures/tontaube_dualcodec_encoder_golden.pt from DualCodec's own code (the reference of
backend_python/models/tontaube/dualcodec_encoder.py), as the PyPI wheel `dualcodec==0.4.2` ships it:

    pip download dualcodec==0.4.2 --no-deps && python -m wheel unpack dualcodec-0.4.2-py3-none-any.whl
    python tools/make_tontaube_encoder_fixture.py [dualcodec-0.4.2] [--out tests/fixtures/...encoder_golden.pt]

It loads `dualcodec_model.py` and its siblings by file as tools/make_tontaube_fixture.py does (its stubs), and on
the CPU in float32:

- builds a tiny `DualCodec` (the decoder fixture's tiny widths, a small DAC encoder at the same 1,920-sample hop
  with an odd rate, the 1,024-channel latent, one acoustic level more than TontaubeV1 uses), gives every parameter
  random values (that tool's `randomise`) and rounds them to float16 values, so the fixture stores them exactly;
- draws audio (BATCH rows of SAMPLES, not whole frames: a tone plus noise, float16 values) and random semantic
  features (`semantic_repr`, N(0, 1), float16 values) of as many frames as the reference's feature path gives that
  audio (transformers' `SeamlessM4TFeatureExtractor` on torchaudio's ceil(2T / 3) samples at 16 kHz, its frames
  pooled by 4): 1 fewer than DAC's, so the reference cuts DAC's latent;
- runs `DualCodec.encode(audio [B, 1, T], num_quantizers=4, semantic_repr [B, 1024, F])` -> the semantic code and
  3 acoustic codes, recording each quantizer's margin (its best -distance less the second best): seeds are tried
  from SEED until the smallest margin is at least MIN_MARGIN and every level picks several codes, so float32
  rounding cannot flip a code;
- records the parameters `encode` reads (an attribute read of a parameter, while it runs): the encode side, under
  the reference's names;
- builds the official 12hz_v1 (conf/model/dualcodec_12hz_16384_4096_8vq.yaml) on the meta device, encodes
  FULL_SAMPLES of audio there, and records the same encode side's names and shapes, its size and the codes' shapes.

Saved: our tiny config's fields, the reference's whole key list, the encode-side state (float16), the audio, the
features ([B, F, 1024], our layout), the codes, the margins, and the official model's facts.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
import yaml
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.make_tontaube_fixture import TINY, USED_ACOUSTIC, randomise, stub_imports  # noqa: E402

SEED = 0
BATCH, SAMPLES = 2, 5 * 1920 - 700  # 5 DAC frames, 4 semantic ones
FULL_SAMPLES = 3 * 24000  # 38 DAC frames, 37 semantic ones
N_QUANTIZERS = 1 + USED_ACOUSTIC  # as the reference app asks: the semantic code and 3 acoustic ones
MIN_MARGIN = 1e-3
TINY_ENCODER = dict(encoder_dim=1, encoder_rates=[15, 8, 16], latent_dim=1024, n_codebooks=USED_ACOUSTIC + 1)


def reference_frames(samples: int) -> int:
    """The semantic frames the reference's feature path gives `samples` at 24 kHz: torchaudio's resampled length,
    the feature extractor's stacked frames, `avg_pool1d` by 4."""
    from transformers import SeamlessM4TFeatureExtractor

    n16 = -(-2 * samples // 3)
    features = SeamlessM4TFeatureExtractor()(np.zeros(n16, np.float32), sampling_rate=16000, return_tensors="np")
    return features["input_features"].shape[1] // 4


@contextmanager
def parameter_reads(model: nn.Module):
    """The names of `model`'s parameters read as module attributes while the block runs (weight norm reads
    `weight_g`/`weight_v` so, the quantizers their codebooks' `weight`, Snake its `alpha`)."""
    names = {id(p): name for name, p in model.named_parameters()}
    read, original = set(), nn.Module.__getattr__

    def getattr_(module, name):
        value = original(module, name)
        if isinstance(value, nn.Parameter) and id(value) in names:
            read.add(names[id(value)])
        return value

    nn.Module.__getattr__ = getattr_
    try:
        yield read
    finally:
        nn.Module.__getattr__ = original


@contextmanager
def margins(vector_quantize: type):
    """Each `decode_latents` call's per-frame margins (the best -distance less the second best)."""
    seen, original = [], vector_quantize.decode_latents

    def decode_latents(self, latents):
        encodings = nn.functional.normalize(latents.transpose(1, 2).reshape(-1, latents.shape[1]))
        codebook = nn.functional.normalize(self.codebook.weight)
        dist = (encodings.pow(2).sum(1, keepdim=True) - 2 * encodings @ codebook.t()
                + codebook.pow(2).sum(1, keepdim=True).t())
        top = (-dist).topk(2, dim=1).values
        seen.append((top[:, 0] - top[:, 1]).reshape(latents.shape[0], -1))
        return original(self, latents)

    vector_quantize.decode_latents = decode_latents
    try:
        yield seen
    finally:
        vector_quantize.decode_latents = original


def tiny_case(dual_codec: type, vector_quantize: type, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    model = dual_codec(**TINY, **TINY_ENCODER).eval()
    randomise(model, generator)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    frames = reference_frames(SAMPLES)
    t = torch.arange(SAMPLES) / 24000
    tone = 0.3 * torch.sin(2 * torch.pi * (110 + 60 * torch.rand(BATCH, 1, generator=generator)) * t)
    audio = (tone + 0.1 * torch.randn(BATCH, SAMPLES, generator=generator)).half().float()
    features = torch.randn(BATCH, frames, 1024, generator=generator).half().float()
    with torch.no_grad(), margins(vector_quantize) as seen, parameter_reads(model) as read:
        semantic, acoustic = model.encode(audio[:, None], num_quantizers=N_QUANTIZERS,
                                          semantic_repr=features.transpose(1, 2))
    state = model.state_dict()
    return {"seed": seed, "model": model, "reference_keys": list(state),
            "state": {name: state[name].half() for name in sorted(read)},
            "audio": audio.half(), "features": features.half(), "semantic": semantic[:, 0], "acoustic": acoustic,
            "margins": torch.stack(seen, dim=1)}  # [B, levels, F]: the semantic level, then the acoustic ones


def good(case: dict) -> bool:
    codes = torch.cat([case["semantic"][:, None], case["acoustic"]], dim=1)
    distinct = min(codes[:, level].unique().numel() for level in range(codes.shape[1]))
    return case["margins"].min().item() >= MIN_MARGIN and distinct >= 3


def full_fixture(root: Path, dual_codec: type) -> dict:
    """The official model on the meta device: the encode side's names, shapes and size, and the codes' shapes."""
    conf = yaml.safe_load((root / "dualcodec/conf/model/dualcodec_12hz_16384_4096_8vq.yaml").read_text())
    kwargs = {k: v for k, v in conf["model"].items() if k != "_target_"} | {"sample_rate": conf["SAMPLE_RATE"]}
    frames = reference_frames(FULL_SAMPLES)
    with torch.device("meta"):
        model = dual_codec(**kwargs).eval()
        audio = torch.zeros(1, 1, FULL_SAMPLES)
        features = torch.zeros(1, 1024, frames)
    with torch.no_grad(), parameter_reads(model) as read:
        semantic, acoustic = model.encode(audio, num_quantizers=N_QUANTIZERS, semantic_repr=features)
    params = {name: p for name, p in model.named_parameters() if name in read}
    return {"kwargs": kwargs, "shapes": {name: tuple(p.shape) for name, p in params.items()},
            "params": sum(p.numel() for p in params.values()), "samples": FULL_SAMPLES,
            "semantic_shape": tuple(semantic.shape), "acoustic_shape": tuple(acoustic.shape)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", type=Path, nargs="?", default=Path("dualcodec-0.4.2"),
                        help="a folder holding the `dualcodec` package (the unpacked wheel)")
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/tontaube_dualcodec_encoder_golden.pt"))
    args = parser.parse_args()
    stub_imports(args.reference)
    dual_codec = importlib.import_module("dualcodec.model_codec.dualcodec_model").DualCodec
    vector_quantize = importlib.import_module("dualcodec.model_codec.dac_quantize").VectorQuantize
    seed = SEED
    while not good(case := tiny_case(dual_codec, vector_quantize, seed)):
        print(f"seed {seed}: smallest margin {case['margins'].min():.2e}; next")
        seed += 1
    case.pop("model")
    print(f"seed {seed}: codes {tuple(case['semantic'].shape)} + {tuple(case['acoustic'].shape)}, smallest margin "
          f"{case['margins'].min():.2e}, {len(case['state'])} of {len(case['reference_keys'])} tensors read")
    config = {**TINY, "decoder_rates": tuple(TINY["decoder_rates"]), "n_acoustic": USED_ACOUSTIC,
              "encoder_dim": TINY_ENCODER["encoder_dim"], "encoder_rates": tuple(TINY_ENCODER["encoder_rates"])}
    fixture = {"config": config, "reference_kwargs": {**TINY, **TINY_ENCODER}, **case,
               "full": full_fixture(args.reference, dual_codec)}
    full = fixture["full"]
    print(f"official encode side: {full['params']:,} parameters; {FULL_SAMPLES} samples -> "
          f"{full['semantic_shape']} + {full['acoustic_shape']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(fixture, args.out, _use_new_zipfile_serialization=False)  # the zip format's records cost ~40 %
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
