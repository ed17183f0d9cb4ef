"""Build tests/fixtures/tontaube_vibevoice_golden.pt from a checkout of craitech/tontaube (the reference).

    python tools/make_tontaube_vibevoice_fixture.py path/to/tontaube [--out tests/fixtures/tontaube_vibevoice_golden.pt]

TontaubeV1 resynthesises its waveform through the VibeVoice acoustic tokenizer vendored at
`VibeVoice/vibevoice/modular/modular_vibevoice_tokenizer.py`. That file is a module of a package whose
`__init__`s this tool does not run: it is copied into a temporary directory (with `configuration_vibevoice.py`
where the checkout has it) and loaded by file under empty parent packages. What it imports that is
absent or does not fit is stubbed: `configuration_vibevoice` where the checkout lacks it (a config class of the
same fields, `VibeVoiceAcousticTokenizerConfig` as VibeVoice publishes it), and `AutoModel.register`, which
transformers refuses for a config named like its own port (the tool builds the classes directly). apex is
optional in the reference (an ImportError there is handled).

At a tiny size with seed 0, on the CPU in float32, the reference acoustic tokenizer's weights are drawn at
scales that keep every block's branch alive (its own initialisation scales them by 1e-6), rounded to float16
values so that they are saved as float16 and loaded back exactly. Then, as the reference's app/vibevoice_utils.py
calls it:

- `encode(wav [2, 1, 4 * 3200]).mean` -> latents [2, 4, 8] (`vv_encode`), and the same for the first 8,320
  samples (not a whole number of frames: the reference pads it to 3 frames);
- `decode(latents)` whole, and streamed in pieces of 1, 2 and 1 frames through one
  `VibeVoiceTokenizerStreamingCache` with `sample_indices` [2, 5] and `use_cache=True` (`VVDecodeEngine`).

Saved: the reference config's fields, its state dict (its own names, float16), the waveform (float16 values),
the latents and both decodes.
"""
from __future__ import annotations

import argparse
import importlib
import math
import shutil
import sys
import tempfile
import types
from pathlib import Path
from unittest import mock

import torch
from torch import nn

SEED = 0
FRAMES, HOP, BATCH = 4, 3200, 2
RAGGED_SAMPLES = 8320  # 2.6 frames
PIECES = (1, 2, 1)
SAMPLE_INDICES = (2, 5)  # cache slots, as VVDecodeEngine allocates them
MODULE = "VibeVoice.vibevoice.modular"
# The reference's `acoustic_tokenizer_config` fields: VibeVoice-1.5B's but for the sizes (tiny_config() in
# backend_python/models/tontaube/vibevoice.py). One filter doubling over six stages; blocks only at 2 to 16
# channels: a one-channel RMSNorm is about sign(x) and magnifies rounding a hundredfold, and the wide stages'
# blocks would take the file past 400 KB.
CONFIG = {
    "channels": 1, "causal": True, "vae_dim": 8, "fix_std": 0.5, "std_dist_type": "gaussian",
    "corpus_normalize": 0.0, "mixer_layer": "depthwise_conv", "conv_norm": "none", "pad_mode": "constant",
    "disable_last_norm": True, "layernorm": "RMSNorm", "layernorm_eps": 1e-5, "layernorm_elementwise_affine": True,
    "conv_bias": True, "layer_scale_init_value": 1e-6, "weight_init_value": 1e-2,
    "encoder_n_filters": 1, "encoder_ratios": [2, 2, 4, 5, 5, 8], "encoder_depths": "0-2-1-1-1-0-0",
    "decoder_n_filters": 1, "decoder_ratios": [2, 2, 4, 5, 5, 8], "decoder_depths": None,
}


def stub_config_module() -> types.ModuleType:
    """`configuration_vibevoice` where the checkout lacks it: config classes taking the reference's fields."""
    from transformers.configuration_utils import PretrainedConfig

    class VibeVoiceAcousticTokenizerConfig(PretrainedConfig):
        model_type = "vibevoice_acoustic_tokenizer"

        def __init__(self, **kwargs):
            fields = {k: kwargs.pop(k) for k in list(kwargs) if k in CONFIG}
            super().__init__(**kwargs)
            for name, value in {**CONFIG, **fields}.items():
                setattr(self, name, value)

    class VibeVoiceSemanticTokenizerConfig(VibeVoiceAcousticTokenizerConfig):
        model_type = "vibevoice_semantic_tokenizer"

    module = types.ModuleType(f"{MODULE}.configuration_vibevoice")
    module.VibeVoiceAcousticTokenizerConfig = VibeVoiceAcousticTokenizerConfig
    module.VibeVoiceSemanticTokenizerConfig = VibeVoiceSemanticTokenizerConfig
    return module


def load_reference(root: Path, workdir: Path) -> tuple[types.ModuleType, type]:
    """The reference's tokenizer module and its acoustic config class, copied into `workdir` (the checkout is
    left untouched) and loaded by file under empty parent packages."""
    source, target = root / "VibeVoice/vibevoice/modular", workdir / "VibeVoice/vibevoice/modular"
    target.mkdir(parents=True)
    for name in ("modular_vibevoice_tokenizer.py", "configuration_vibevoice.py"):
        if (source / name).is_file():
            shutil.copy(source / name, target / name)
    for name, sub in [("VibeVoice", ""), ("VibeVoice.vibevoice", "vibevoice"), (MODULE, "vibevoice/modular")]:
        package = types.ModuleType(name)
        package.__path__ = [str(workdir / "VibeVoice" / sub)]
        sys.modules[name] = package
    if not (target / "configuration_vibevoice.py").is_file():
        sys.modules[f"{MODULE}.configuration_vibevoice"] = stub_config_module()
    from transformers.models.auto import AutoModel

    with mock.patch.object(AutoModel, "register", lambda *args, **kwargs: None):
        tokenizer = importlib.import_module(f"{MODULE}.modular_vibevoice_tokenizer")
    config = importlib.import_module(f"{MODULE}.configuration_vibevoice").VibeVoiceAcousticTokenizerConfig
    return tokenizer, config


def randomize(model: nn.Module) -> None:
    """Weights at unit-gain scales (fan-in), biases and norm weights near their rest values, layer scales near
    0.5; every value rounded to float16 so the saved float16 state is exact."""
    for module in model.modules():
        if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d, nn.Linear)):
            fan_in = module.weight[0].numel() if not isinstance(module, nn.ConvTranspose1d) \
                else module.in_channels * module.kernel_size[0] // module.stride[0]
            module.weight.data.normal_(0.0, 1.0 / math.sqrt(fan_in))
            module.bias.data.normal_(0.0, 0.1)
    for name, parameter in model.named_parameters():
        if name.endswith("norm.weight"):
            parameter.data.normal_(1.0, 0.1)
        elif name.endswith("gamma"):
            parameter.data.normal_(0.5, 0.1)
        parameter.data.copy_(parameter.data.half().float())


def stream_decode(tokenizer, model: nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """`decode` piece by piece through one streaming cache, as `VVDecodeEngine._process_batch` calls it."""
    cache, slots, pieces, start = tokenizer.VibeVoiceTokenizerStreamingCache(), torch.tensor(SAMPLE_INDICES), [], 0
    for n in PIECES:
        pieces.append(model.decode(latents[:, start:start + n], cache=cache, sample_indices=slots, use_cache=True))
        start += n
    return torch.cat(pieces, dim=-1)


def build_fixture(root: Path) -> dict:
    with tempfile.TemporaryDirectory() as workdir:
        tokenizer, config_class = load_reference(root, Path(workdir))
    torch.manual_seed(SEED)
    model = tokenizer.VibeVoiceAcousticTokenizerModel(config_class(**CONFIG)).eval()
    randomize(model)
    waveform = (0.3 * torch.randn(BATCH, FRAMES * HOP)).half()
    wav = waveform.float()[:, None]
    with torch.no_grad():
        latents = model.encode(wav).mean
        ragged = model.encode(wav[..., :RAGGED_SAMPLES]).mean
        decoded = model.decode(latents)
        streamed = stream_decode(tokenizer, model, latents)
    return {"config": CONFIG, "state": {k: v.half() for k, v in model.state_dict().items()},
            "waveform": waveform, "latents": latents, "ragged_samples": RAGGED_SAMPLES, "ragged_latents": ragged,
            "decoded": decoded[:, 0], "streamed": streamed[:, 0], "pieces": list(PIECES)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", type=Path, help="a checkout of craitech/tontaube")
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/tontaube_vibevoice_golden.pt"))
    args = parser.parse_args()
    fixture = build_fixture(args.reference)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(fixture, args.out, _use_new_zipfile_serialization=False)  # the zip format's records cost ~40 %
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
