"""The nodes and initializers of an ONNX file, read without the `onnx` package.

Some official checkpoints ship a network only as ONNX (CosyVoice's campplus.onnx); a family that has the
same network in torch reads the weights out of it. An ONNX file is one protobuf message (`ModelProto`), so
this walks the protobuf wire format for the few fields it needs: the graph's nodes (name, op type, inputs,
outputs) and its initializers (name, dims, data type, raw data). Tensors kept in external files, or in typed
fields rather than raw_data, are refused.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

# field numbers of onnx.proto3 (ModelProto.graph, GraphProto.node / .initializer, NodeProto.*, TensorProto.*)
MODEL_GRAPH = 7
GRAPH_NODE, GRAPH_INITIALIZER = 1, 5
NODE_INPUT, NODE_OUTPUT, NODE_NAME, NODE_OP_TYPE = 1, 2, 3, 4
TENSOR_DIMS, TENSOR_DATA_TYPE = 1, 2
TENSOR_NAME, TENSOR_RAW_DATA, TENSOR_DATA_LOCATION = 8, 9, 14
EXTERNAL_DATA = 1  # TensorProto.DataLocation.EXTERNAL
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5  # protobuf wire types

TORCH_DTYPES = {1: torch.float32, 2: torch.uint8, 3: torch.int8, 5: torch.int16, 6: torch.int32, 7: torch.int64,
                9: torch.bool, 10: torch.float16, 11: torch.float64, 16: torch.bfloat16}  # TensorProto.DataType


@dataclass(frozen=True)
class OnnxNode:
    name: str  # a torch export names it after the module that ran it: "/xvector/tdnn/linear/Conv"
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class OnnxGraph:
    nodes: tuple[OnnxNode, ...]  # in graph (topological) order
    initializers: dict[str, torch.Tensor]  # CPU tensors in their stored dtype

    def nodes_by_name(self) -> dict[str, OnnxNode]:
        return {node.name: node for node in self.nodes if node.name}


def read_onnx(path: str | Path) -> OnnxGraph:
    """The main graph of an ONNX file: its nodes and initializers."""
    data = memoryview(Path(path).read_bytes())
    graphs = [value for number, _, value in fields(data) if number == MODEL_GRAPH]
    if len(graphs) != 1:
        raise ValueError(f"{path} is not an ONNX model: {len(graphs)} graphs")
    nodes, initializers = [], {}
    for number, _, value in fields(graphs[0]):
        if number == GRAPH_NODE:
            nodes.append(parse_node(value))
        elif number == GRAPH_INITIALIZER:
            name, tensor = parse_tensor(value)
            initializers[name] = tensor
    return OnnxGraph(tuple(nodes), initializers)


def fields(message: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of each field of a protobuf message: an int for a varint, the bytes
    of anything else."""
    pos = 0
    while pos < len(message):
        key, pos = varint(message, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == VARINT:
            value, pos = varint(message, pos)
        else:
            if wire_type == LENGTH_DELIMITED:
                size, pos = varint(message, pos)
            elif wire_type in (FIXED64, FIXED32):
                size = 8 if wire_type == FIXED64 else 4
            else:
                raise ValueError(f"unsupported protobuf wire type {wire_type} (field {number})")
            value, pos = message[pos: pos + size], pos + size
        yield number, wire_type, value


def varint(data: memoryview, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it."""
    value, shift = 0, 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def parse_node(message: memoryview) -> OnnxNode:
    strings: dict[int, list[str]] = {NODE_INPUT: [], NODE_OUTPUT: [], NODE_NAME: [], NODE_OP_TYPE: []}
    for number, _, value in fields(message):
        if number in strings:
            strings[number].append(bytes(value).decode("utf-8"))
    name, op_type = (strings[NODE_NAME] or [""])[0], (strings[NODE_OP_TYPE] or [""])[0]
    return OnnxNode(name, op_type, tuple(strings[NODE_INPUT]), tuple(strings[NODE_OUTPUT]))


def parse_tensor(message: memoryview) -> tuple[str, torch.Tensor]:
    """A TensorProto's name and values; a torch export keeps every initializer's values in raw_data."""
    name, dims, data_type, raw = "", [], 0, None
    for number, wire_type, value in fields(message):
        if number == TENSOR_NAME:
            name = bytes(value).decode("utf-8")
        elif number == TENSOR_DIMS:
            dims.extend(packed_varints(value) if wire_type == LENGTH_DELIMITED else [value])
        elif number == TENSOR_DATA_TYPE:
            data_type = value
        elif number == TENSOR_RAW_DATA:
            raw = value
        elif number == TENSOR_DATA_LOCATION and value == EXTERNAL_DATA:
            raise ValueError(f"ONNX tensor {name or '?'} is stored in an external file, which is not supported")
    if data_type not in TORCH_DTYPES:
        raise ValueError(f"ONNX tensor {name} has unsupported data type {data_type}")
    if raw is None:
        raise ValueError(f"ONNX tensor {name} has no raw_data (values in typed fields are not supported)")
    dtype = TORCH_DTYPES[data_type]
    values = torch.frombuffer(bytearray(raw), dtype=dtype) if len(raw) else torch.empty(0, dtype=dtype)
    return name, values.reshape(dims)


def packed_varints(data: memoryview) -> list[int]:
    values, pos = [], 0
    while pos < len(data):
        value, pos = varint(data, pos)
        values.append(value)
    return values
