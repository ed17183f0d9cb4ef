"""Build tests/fixtures/tontaube_dualcodec_golden.pt from DualCodec's own code (the reference of
backend_python/models/tontaube/dualcodec.py), as the PyPI wheel `dualcodec==0.4.2` ships it:

    pip download dualcodec==0.4.2 --no-deps && python -m wheel unpack dualcodec-0.4.2-py3-none-any.whl
    python tools/make_tontaube_fixture.py [dualcodec-0.4.2] [--out tests/fixtures/tontaube_dualcodec_golden.pt]

The package's `__init__`s pull in hydra, transformers and the TTS models, so this tool loads `dualcodec_model.py` and
its siblings by file under stub parent packages, and stubs the imports they name but decoding never runs
(`audiotools`, `easydict`, `einops` where absent). On the CPU with a fixed seed it:

- builds a tiny `DualCodec` (the widths of `tiny_config()`, the 1,024-channel latent the reference fixes, one
  acoustic level more than TontaubeV1 decodes), gives every parameter random non-trivial values (the reference's
  own start has zero biases and unit snakes), scales the last conv so the waveform stays off tanh's rails, and rounds
  every weight to a float16 value, so the fixture stores them at half precision and loses nothing;
- runs `decode_from_codes` on random codes (BATCH x FRAMES, the semantic code and 3 acoustic levels), with autograd
  on, and keeps the parameters the audio depends on: the decode side, under the reference's names;
- builds the official 12hz_v1 (conf/model/dualcodec_12hz_16384_4096_8vq.yaml) on the meta device and records the
  same decode side's names and shapes, its parameter count and the audio length of FULL_FRAMES frames.

Saved: the tiny config, the reference's whole key list, the decode-side state, the codes, the audio, and the
official model's facts.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import types
from pathlib import Path

import torch
import yaml
from torch import nn

SEED = 0
BATCH, FRAMES, FULL_FRAMES = 2, 6, 3
USED_ACOUSTIC = 3  # the acoustic levels TontaubeV1 decodes
TINY = dict(decoder_dim=8, decoder_rates=[8, 15, 16], convnext_dim=4, convnext_layers=1, semantic_codebook_size=32,
            semantic_codebook_dim=3, codebook_size=16, codebook_dim=2, is_causal=True, sample_rate=24000)
TINY_ENCODER = dict(encoder_dim=1, encoder_rates=[8, 15, 16], latent_dim=1024, n_codebooks=USED_ACOUSTIC + 1)
TARGET_STD = 0.5  # of the last conv's output (before tanh)
RESIDUAL_GAIN = 0.3  # of each residual unit's branch, so the activations stay near unit scale


def stub_imports(root: Path) -> None:
    """Parent packages as empty modules (their `__init__`s are not run), and stubs of absent imports."""
    for name, sub in (("dualcodec", ""), ("dualcodec.model_codec", "model_codec")):
        module = types.ModuleType(name)
        module.__path__ = [str(root / "dualcodec" / sub)]
        sys.modules[name] = module
    stubs = {"audiotools": {"AudioSignal": object}, "audiotools.ml": {"BaseModel": nn.Module},
             "easydict": {"EasyDict": dict}, "einops": {"rearrange": None}}
    absent = {name for name in stubs if importlib.util.find_spec(name.split(".")[0]) is None}
    for name, attributes in stubs.items():
        if name in absent:
            sys.modules[name] = types.ModuleType(name)
            vars(sys.modules[name]).update(attributes)


def reference_decode(model: nn.Module, semantic: torch.Tensor, acoustic: torch.Tensor) -> tuple[torch.Tensor, list]:
    """`DualCodec.decode_from_codes` with autograd on (its `no_grad` unwrapped): the audio, and the names of the
    parameters it depends on."""
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        audio = type(model).decode_from_codes.__wrapped__(model, semantic, acoustic)
        audio.sum().backward()
    used = [name for name, p in model.named_parameters() if p.grad is not None]
    return audio.detach(), used


@torch.no_grad()
def randomise(model: nn.Module, generator: torch.Generator) -> None:
    """Every parameter random: convs' directions N(0, 1) with norms about 1 (a transposed conv's a little more,
    as its taps spread over its stride; a residual branch's less), snakes' alphas in [0.5, 2], biases small,
    codebooks N(0, 1): the activations stay near unit scale, so float32's rounding stays small in the audio."""
    def uniform(shape, low, high):
        return low + (high - low) * torch.rand(shape, generator=generator)

    for module in model.modules():
        if hasattr(module, "weight_g"):
            module.weight_v.copy_(torch.randn(module.weight_v.shape, generator=generator))
            stride = module.stride[0] if isinstance(module, nn.ConvTranspose1d) else 2
            module.weight_g.copy_(uniform(module.weight_g.shape, 0.6, 1.4) * (stride / 2) ** 0.25)
        elif isinstance(module, (nn.Linear, nn.Conv1d)):
            fan_in = module.weight[0].numel()
            module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * fan_in ** -0.5)
        elif isinstance(module, nn.LayerNorm):
            module.weight.copy_(1 + 0.1 * torch.randn(module.weight.shape, generator=generator))
        elif isinstance(module, nn.Embedding):
            module.weight.copy_(torch.randn(module.weight.shape, generator=generator))
        if getattr(module, "bias", None) is not None:
            module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator))
        if hasattr(module, "alpha"):
            module.alpha.copy_(uniform(module.alpha.shape, 0.5, 2.0))
    for module in model.modules():
        if type(module).__name__ == "ResidualUnit":  # its branch small, so the residual stack keeps the scale
            module.block[3].weight_g.mul_(RESIDUAL_GAIN)


@torch.no_grad()
def level_output(model: nn.Module, semantic: torch.Tensor, acoustic: torch.Tensor) -> None:
    """Scale the last conv (norm and bias) so its output, tanh's input, has about TARGET_STD."""
    last = model.dac.decoder.model[-2]
    seen = []
    handle = last.register_forward_hook(lambda _, __, out: seen.append(out.std().item()))
    model.decode_from_codes(semantic, acoustic)
    handle.remove()
    last.weight_g.mul_(TARGET_STD / seen[0])
    last.bias.mul_(TARGET_STD / seen[0])


def random_codes(generator: torch.Generator, config: dict, batch: int, frames: int) -> tuple[torch.Tensor, ...]:
    """The reference's code layout: semantic [B, 1, T], acoustic [B, USED_ACOUSTIC, T]."""
    semantic = torch.randint(0, config["semantic_codebook_size"], (batch, 1, frames), generator=generator)
    acoustic = torch.randint(0, config["codebook_size"], (batch, USED_ACOUSTIC, frames), generator=generator)
    return semantic, acoustic


def tiny_fixture(dual_codec: type) -> dict:
    generator = torch.Generator().manual_seed(SEED)
    model = dual_codec(**TINY, **TINY_ENCODER).eval()
    randomise(model, generator)
    semantic, acoustic = random_codes(generator, TINY, BATCH, FRAMES)
    level_output(model, semantic, acoustic)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    audio, used = reference_decode(model, semantic, acoustic)
    railed = (audio.abs() > 0.99).float().mean()
    print(f"tiny audio {tuple(audio.shape)}: std {audio.std():.3f}, |x| > 0.99: {railed:.3%}")
    state = model.state_dict()
    return {"config": {**TINY, "decoder_rates": tuple(TINY["decoder_rates"]), "n_acoustic": USED_ACOUSTIC},
            "reference_kwargs": {**TINY, **TINY_ENCODER}, "reference_keys": list(state),
            "state": {name: state[name].half() for name in used},
            "semantic": semantic[:, 0], "acoustic": acoustic, "audio": audio[:, 0]}


def full_fixture(root: Path, dual_codec: type) -> dict:
    """The official model on the meta device: the decode side's names, shapes and size, and an output length."""
    conf = yaml.safe_load((root / "dualcodec/conf/model/dualcodec_12hz_16384_4096_8vq.yaml").read_text())
    kwargs = {k: v for k, v in conf["model"].items() if k != "_target_"} | {"sample_rate": conf["SAMPLE_RATE"]}
    with torch.device("meta"):
        model = dual_codec(**kwargs).eval()
        semantic = torch.zeros(1, 1, FULL_FRAMES, dtype=torch.long)
        acoustic = torch.zeros(1, USED_ACOUSTIC, FULL_FRAMES, dtype=torch.long)
    audio, used = reference_decode(model, semantic, acoustic)
    params = {name: p for name, p in model.named_parameters() if name in used}
    return {"kwargs": kwargs, "shapes": {name: tuple(p.shape) for name, p in params.items()},
            "params": sum(p.numel() for p in params.values()), "frames": FULL_FRAMES, "audio_length": audio.shape[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", type=Path, nargs="?", default=Path("dualcodec-0.4.2"),
                        help="a folder holding the `dualcodec` package (the unpacked wheel)")
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/tontaube_dualcodec_golden.pt"))
    args = parser.parse_args()
    stub_imports(args.reference)
    dual_codec = importlib.import_module("dualcodec.model_codec.dualcodec_model").DualCodec
    fixture = {**tiny_fixture(dual_codec), "full": full_fixture(args.reference, dual_codec)}
    print(f"official decode side: {fixture['full']['params']:,} parameters; {FULL_FRAMES} frames -> "
          f"{fixture['full']['audio_length']} samples")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(fixture, args.out, _use_new_zipfile_serialization=False)  # the zip format's records cost ~40 %
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
