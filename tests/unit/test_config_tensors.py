"""The tensor sections of the committed config.pbtxt files are protocol.tensors' tables, and their request limits
protocol.limits' (`voxlane serve` renders those; test_config_defaults holds the committed files to the rendering)."""
from __future__ import annotations

import re

import pytest

from server.serve import REPOSITORY
from protocol.limits import PARAMETERS, RequestLimits
from protocol.models import LM, ROUTER, VOICE_ENCODER
from protocol.tensors import (CONTROL_INPUTS, LM_INPUT_NAMES, LM_INTERNAL_INPUTS, REFERENCE_LM_INPUTS,
                              REFERENCE_TENSORS, REQUEST_INPUTS, RESPONSE_OUTPUTS, VOICE_SPEC, TensorSpec)

_TENSOR = re.compile(r'\{ name: "(\w+)" data_type: TYPE_(\w+) dims: \[ ([^\]]*) \]([^}]*)\}')
_PARAMETER = re.compile(r'parameters\s*\{\s*key:\s*"([^"]+)"\s*value:\s*\{\s*string_value:\s*"([^"]*)"\s*\}\s*\}')


def section(model: str, kind: str) -> list[tuple[str, str, tuple[int, ...]]]:
    """A config.pbtxt's `input` or `output` tensors in order: (name, Triton datatype, dims)."""
    text = (REPOSITORY / model / "config.pbtxt").read_text()
    block = re.search(rf"^{kind} \[(.*?)^\]", text, re.S | re.M).group(1)
    return [(name, "BYTES" if kind_ == "STRING" else kind_, tuple(int(d) for d in dims.split(",")))
            for name, kind_, dims, _ in _TENSOR.findall(block)]


def declared(specs: list[TensorSpec]) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(spec.name, spec.triton_type, spec.shape) for spec in specs]


def test_the_router_declares_the_request_and_control_inputs_and_the_response_outputs():
    assert section(ROUTER, "input") == declared([*REQUEST_INPUTS.values(), *CONTROL_INPUTS.values()])
    assert section(ROUTER, "output") == declared(list(RESPONSE_OUTPUTS.values()))


def test_the_lm_declares_its_client_inputs_the_routers_and_a_voices():
    voice = [REQUEST_INPUTS.get(name) or REFERENCE_TENSORS[name] for name in REFERENCE_LM_INPUTS]
    expected = [*(REQUEST_INPUTS[name] for name in LM_INPUT_NAMES), *LM_INTERNAL_INPUTS.values(), *voice]
    assert section(LM, "input") == declared(expected)


def test_the_voice_encoder_takes_the_reference_audio_and_answers_the_reference_tensors():
    reference = [REQUEST_INPUTS[name] for name in ("ref_audio", "ref_sample_rate", "x_vector_only")]
    assert section(VOICE_ENCODER, "input") == declared(reference)
    spec = TensorSpec(VOICE_SPEC, "BYTES", object)
    assert section(VOICE_ENCODER, "output") == declared([*REFERENCE_TENSORS.values(), spec])


@pytest.mark.parametrize("model", [ROUTER, LM])
def test_the_request_limits_are_protocols(model):
    parameters = dict(_PARAMETER.findall((REPOSITORY / model / "config.pbtxt").read_text()))
    assert {key: parameters[key] for key in PARAMETERS} == RequestLimits().to_parameters()
    assert RequestLimits.from_parameters(parameters) == RequestLimits()


def test_every_router_input_is_optional():
    """`text` too: a control request carries none (the router requires it of a speech request itself)."""
    text = (REPOSITORY / ROUTER / "config.pbtxt").read_text()
    assert all(rest.strip() == "optional: true" for *_, rest in _TENSOR.findall(text.split("output [")[0]))
