"""`SamplingParams` takes its defaults and ranges from the request's tensor table (protocol/tensors.py): the
documented bounds hold as the FP32 inputs carry them, and a value outside names its field."""
from __future__ import annotations

import numpy as np
import pytest

from backend_python.models.base import SamplingParams
from protocol.tensors import REQUEST_INPUTS


def test_the_defaults_are_the_tables():
    params = SamplingParams()
    for name in ("temperature", "top_k", "top_p", "repetition_penalty"):
        assert getattr(params, name) == REQUEST_INPUTS[name].default, name


def test_the_documented_bounds_are_accepted_as_fp32_carries_them():
    low_top_p = float(np.float32(REQUEST_INPUTS["top_p"].low))  # 1e-6 arrives as 9.99999997e-07
    assert low_top_p < REQUEST_INPUTS["top_p"].low
    SamplingParams(top_p=low_top_p, temperature=float(np.float32(10.0)), repetition_penalty=float(np.float32(1e-3)))


@pytest.mark.parametrize("field, value", [("top_p", 0.0), ("temperature", -0.1), ("top_k", -1),
                                          ("repetition_penalty", 11.0), ("top_k", 100_001)])
def test_a_value_outside_names_its_field(field, value):
    with pytest.raises(ValueError, match=f"^{field} must be in"):
        SamplingParams(**{field: value})
