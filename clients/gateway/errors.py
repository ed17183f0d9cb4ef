"""Errors in OpenAI's JSON shape, and how Triton's errors map onto them."""
from __future__ import annotations

import re
from dataclasses import dataclass

import grpc

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"
# Triton input names that the OpenAI request spells differently
_PARAMS = {"text": "input"}
_INPUT_NAME = re.compile(r"input '(\w+)'")


@dataclass(frozen=True)
class ApiError:
    """One error response: its HTTP status and OpenAI's `{"error": {...}}` fields."""

    status: int
    message: str
    type: str = INVALID_REQUEST
    param: str | None = None
    code: str | None = None

    def to_json(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, INVALID_REQUEST, param, code)


def unavailable(message: str, code: str = "unavailable") -> ApiError:
    return ApiError(503, message, SERVER_ERROR, None, code)


def from_triton_message(message: str) -> ApiError:
    """A Triton error response: overload is 503, an internal failure 500, anything else the request's fault."""
    if message.startswith("server overloaded"):
        return unavailable(message, code="overloaded")
    if message.startswith("internal error"):
        return ApiError(500, message, SERVER_ERROR, None, "internal_error")
    if "unknown voice" in message:
        return bad_request(message, param="voice", code="unknown_voice")
    named = _INPUT_NAME.search(message)
    param = _PARAMS.get(named.group(1), named.group(1)) if named else None
    return bad_request(message, param=param)


def from_grpc_error(error: grpc.aio.AioRpcError) -> ApiError:
    """The gRPC call itself failed: the server is down, restarting or gone (503), else 500."""
    text = f"triton {error.code().name}: {error.details()}"
    if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.RESOURCE_EXHAUSTED):
        return unavailable(text)
    return ApiError(500, text, SERVER_ERROR, None, "internal_error")
