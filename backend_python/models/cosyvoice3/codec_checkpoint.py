"""The CosyVoice 3 codec's weights from elsewhere than its own files: the reference's model dir (cosyvoice3.yaml,
flow.pt, hift.pt) read as plain data, and deterministic random weights for a random codec."""
from __future__ import annotations

import math
import re
from pathlib import Path

import torch
from safetensors import safe_open

from ..layers.dit import DiTConfig
from .codec_config import CosyVoice3CodecConfig
from .flow import FlowConfig
from .hift import HiFTConfig, fold_weight_norm


def read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(file), framework="pt", device="cpu") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def read_official(path: Path) -> tuple[CosyVoice3CodecConfig, dict[str, torch.Tensor]]:
    """The reference dir's config (from cosyvoice3.yaml) and state: flow.pt under flow., hift.pt (its
    'generator.' prefix dropped, weight norm folded) under hift."""
    cfg = config_from_yaml(read_hyperpyyaml((path / "cosyvoice3.yaml").read_text()))
    flow = torch.load(path / "flow.pt", map_location="cpu", weights_only=True)
    hift = torch.load(path / "hift.pt", map_location="cpu", weights_only=True)
    hift = fold_weight_norm({k.removeprefix("generator."): v for k, v in hift.items()})
    return cfg, {**{f"flow.{k}": v for k, v in flow.items()}, **{f"hift.{k}": v for k, v in hift.items()}}


def read_hyperpyyaml(text: str) -> dict:
    """A hyperpyyaml file as plain data: tagged nodes (!new:, !name:, !apply:, !ref) become the mapping,
    list or string under the tag, and a string '<key>' (a !ref) becomes the top-level key's value."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def untag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("!", untag)
    data = yaml.load(text, Loader=Loader)

    def resolve(value):
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v) for v in value]
        ref = re.fullmatch(r"<(\w+)>", value) if isinstance(value, str) else None
        return resolve(data[ref.group(1)]) if ref and ref.group(1) in data else value

    return resolve(data)


def config_from_yaml(conf: dict) -> CosyVoice3CodecConfig:
    """CosyVoice3CodecConfig from a parsed cosyvoice3.yaml (its `flow` and `hift` sections)."""
    flow, hift = conf["flow"], conf["hift"]
    est = flow["decoder"]["estimator"]
    estimator = DiTConfig(dim=int(est["dim"]), depth=int(est["depth"]), heads=int(est["heads"]),
                          dim_head=int(est["dim_head"]), ff_mult=int(est["ff_mult"]), mel_dim=int(est["mel_dim"]),
                          mu_dim=int(est.get("mu_dim", est["mel_dim"])), spk_dim=int(est["spk_dim"]))
    flow_cfg = FlowConfig(vocab_size=int(flow["vocab_size"]), input_size=int(flow["input_size"]),
                          output_size=int(flow["output_size"]), spk_embed_dim=int(flow["spk_embed_dim"]),
                          token_mel_ratio=int(flow["token_mel_ratio"]),
                          pre_lookahead_len=int(flow["pre_lookahead_len"]),
                          pre_lookahead_channels=int(flow["pre_lookahead_layer"]["channels"]), estimator=estimator)
    istft, f0 = hift["istft_params"], hift["f0_predictor"]
    hift_cfg = HiFTConfig(
        in_channels=int(hift["in_channels"]), base_channels=int(hift["base_channels"]),
        nb_harmonics=int(hift["nb_harmonics"]), sampling_rate=int(hift["sampling_rate"]),
        nsf_alpha=float(hift["nsf_alpha"]), nsf_sigma=float(hift["nsf_sigma"]),
        nsf_voiced_threshold=float(hift["nsf_voiced_threshold"]), upsample_rates=hift["upsample_rates"],
        upsample_kernel_sizes=hift["upsample_kernel_sizes"], istft_n_fft=int(istft["n_fft"]),
        istft_hop_len=int(istft["hop_len"]), resblock_kernel_sizes=hift["resblock_kernel_sizes"],
        resblock_dilation_sizes=hift["resblock_dilation_sizes"],
        source_resblock_kernel_sizes=hift["source_resblock_kernel_sizes"],
        source_resblock_dilation_sizes=hift["source_resblock_dilation_sizes"],
        lrelu_slope=float(hift["lrelu_slope"]), audio_limit=float(hift["audio_limit"]),
        conv_pre_look_right=int(hift.get("conv_pre_look_right", 4)), f0_cond_channels=int(f0["cond_channels"]))
    cfm = flow["decoder"].get("cfm_params", {})
    cfm = cfm.get("content", cfm) if isinstance(cfm, dict) else {}
    return CosyVoice3CodecConfig(flow=flow_cfg, hift=hift_cfg, cfg_rate=float(cfm.get("inference_cfg_rate", 0.7)))


def random_parameter(name: str, param: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A random value for one parameter of a random codec (no parameter is left zero)."""
    leaf, shape = name.rsplit(".", 1)[-1], param.shape
    randn = torch.randn(shape, generator=generator)
    if name == "hift.f0_predictor.classifier.bias":
        return 150.0 + 10.0 * randn  # f0 around 150 Hz: voiced, so the sine source is exercised
    if name == "hift.f0_predictor.classifier.weight":
        return 40.0 * randn / math.sqrt(shape[1])
    if leaf == "alpha":  # Snake
        return 1.0 + 0.1 * randn
    if leaf == "bias":
        return 0.02 * randn
    if param.dim() == 2 and "embedding" in name and "affine" not in name:
        return randn
    fan_in = param[0].numel()
    return gain_of(name) * randn / math.sqrt(fan_in)


def gain_of(name: str) -> float:
    if ".attn_norm.linear" in name or ".norm_out.linear" in name:
        return 0.3  # AdaLN modulations around (1 + small) scales
    if name.startswith("hift.conv_post"):
        return 0.3  # log-magnitudes near 0: exp() neither explodes nor clips
    if ".convs2." in name:
        return 0.5  # keep residual stacks from compounding the level
    return 1.0
