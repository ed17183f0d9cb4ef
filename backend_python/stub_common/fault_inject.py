"""A test-only fault hook, off unless `VOXLANE_FAULT_INJECT` is set when a model initialises.

With `VOXLANE_FAULT_INJECT=MARKER` in tritonserver's environment, the router
tags the codec calls of every request whose text contains MARKER (a BLS request
parameter), and the codec lane raises while decoding a tagged window, as a bug
in one request's decode would. Without the variable nothing is tagged and a
tag sent from outside is ignored. The fault-isolation tests use it.
"""
from __future__ import annotations

import json
import os

ENV = "VOXLANE_FAULT_INJECT"
PARAMETER = "voxlane_fault_inject"


class InjectedFault(RuntimeError):
    """The failure the hook raises inside a codec call."""


def marker_from_env() -> str | None:
    """The marker, or None when the hook is off (the default)."""
    return os.environ.get(ENV) or None


def codec_parameters(marker: str | None, text: str) -> dict:
    """The BLS parameters of a request's codec calls: the tag when the hook is on and the text is marked."""
    return {PARAMETER: True} if marker and marker in text else {}


def is_tagged(marker: str | None, parameters_json: str) -> bool:
    """Whether a codec request carries the tag (always False when the hook is off)."""
    return marker is not None and bool(json.loads(parameters_json or "{}").get(PARAMETER, False))
