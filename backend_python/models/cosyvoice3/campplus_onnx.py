"""CosyVoice's campplus.onnx -> the state dict of our CAM++ (`CampPlus`, 3D-Speaker's names).

CosyVoice ships CAM++ only as ONNX: a torch export of 3D-Speaker's `CAMPPlus` in eval mode. Such an export
names each node after the module that ran it ("/xvector/block1/tdnnd1/linear1/Conv", `onnx_scope`), so each
conv and BatchNorm of ours finds its node by name and its tensors among the node's inputs. The exporter folds
a BatchNorm that directly follows a conv into that conv (scaled weight, a new bias) and leaves it no node; we
load the folded conv as it is and make that BatchNorm the identity plus the folded bias, which computes the
same. The BatchNorm a conv feeds is the next one of `named_modules()`: our modules register them in the order
they run.
"""
from __future__ import annotations

import torch
from torch import nn

from ..onnx_io import OnnxGraph, OnnxNode
from .campplus import CampPlus

CONVS = (nn.Conv1d, nn.Conv2d)
BATCHNORMS = (nn.BatchNorm1d, nn.BatchNorm2d)


def onnx_scope(qualified_name: str) -> str:
    """The scope a torch export gives a module's nodes: "head.layer1.0.conv1" -> "/head/layer1/layer1.0/conv1".
    Each level is named from its last non-numeric atom on (torch.onnx's `_unqualified_variable_name`)."""
    atoms = qualified_name.split(".")
    levels = []
    for end in range(1, len(atoms) + 1):
        start = max((i for i in range(end) if not atoms[i].isnumeric()), default=0)
        levels.append(".".join(atoms[start:end]))
    return "/" + "/".join(levels)


def campplus_state_from_onnx(net: CampPlus, graph: OnnxGraph) -> dict[str, torch.Tensor]:
    """Every tensor of `net`'s state dict, float32, out of a torch export of 3D-Speaker's CAMPPlus."""
    nodes = graph.nodes_by_name()
    state: dict[str, torch.Tensor] = {}
    folded_bias = None  # the bias of the last conv's node that the conv itself lacks: a folded BatchNorm's
    for name, module in net.named_modules():
        if isinstance(module, CONVS):
            node = find_node(nodes, name, "Conv")
            state[f"{name}.weight"] = initializer(graph, node, 1)
            bias = initializer(graph, node, 2) if len(node.inputs) > 2 else None
            if module.bias is not None:
                state[f"{name}.bias"] = require(bias, f"{node.name} has no bias")
            folded_bias = bias if module.bias is None else None
        elif isinstance(module, BATCHNORMS):
            node = nodes.get(f"{onnx_scope(name)}/BatchNormalization")
            state.update(batchnorm_state(name, module, graph, node) if node is not None
                         else folded_batchnorm_state(name, module, folded_bias))
            folded_bias = None
    return state


def find_node(nodes: dict[str, OnnxNode], module_name: str, op_type: str) -> OnnxNode:
    node = nodes.get(f"{onnx_scope(module_name)}/{op_type}")
    if node is None:
        raise ValueError(f"campplus.onnx has no node {onnx_scope(module_name)}/{op_type} (for {module_name}): not a "
                         "torch export of 3D-Speaker's CAMPPlus with this config")
    return node


def initializer(graph: OnnxGraph, node: OnnxNode, index: int) -> torch.Tensor:
    tensor = graph.initializers.get(node.inputs[index])
    return require(tensor, f"input {index} of {node.name} ({node.inputs[index]}) is not an initializer").float()


def require(tensor: torch.Tensor | None, message: str) -> torch.Tensor:
    if tensor is None:
        raise ValueError(f"campplus.onnx: {message}")
    return tensor


def batchnorm_state(name: str, module: nn.modules.batchnorm._BatchNorm, graph: OnnxGraph,
                    node: OnnxNode) -> dict[str, torch.Tensor]:
    """A BatchNormalization node's tensors: inputs (x, scale, bias, mean, var); no affine: mean and var only."""
    state = {f"{name}.running_mean": initializer(graph, node, 3), f"{name}.running_var": initializer(graph, node, 4),
             f"{name}.num_batches_tracked": torch.tensor(0)}
    if module.affine:
        state.update({f"{name}.weight": initializer(graph, node, 1), f"{name}.bias": initializer(graph, node, 2)})
    return state


def folded_batchnorm_state(name: str, module: nn.modules.batchnorm._BatchNorm,
                           bias: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """A BatchNorm folded into the conv before it: the identity ((x - 0) / sqrt(1 - eps + eps) * 1), plus the
    folded bias."""
    if bias is None or not module.affine:
        raise ValueError(f"campplus.onnx has no BatchNormalization node for {name} ({onnx_scope(name)}), and the "
                         "conv before it has no folded bias")
    return {f"{name}.weight": torch.ones_like(bias), f"{name}.bias": bias,
            f"{name}.running_mean": torch.zeros_like(bias),
            f"{name}.running_var": torch.full_like(bias, 1 - module.eps),
            f"{name}.num_batches_tracked": torch.tensor(0)}
