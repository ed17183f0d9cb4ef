"""Errors in OpenAI's JSON shape, and how a stream's `Ended` reason maps onto them.

| reason | status | `code` | |
| --- | --- | --- | --- |
| `bad_input` (and Triton's own refusals) | 400 | the server's (e.g. `unknown_voice`) | `param`: the input it names |
| `bad_input` with code `voice_not_found` / `voice_exists` | 404 / 409 | the server's | the voice registry's refusals |
| `overloaded` | 503 | `overloaded` | `Retry-After`; the gateway tries another server first |
| `lane_down` | 503 | `lane_down` | `Retry-After`; the gateway tries another server first |
| `cancelled` with a code (a streaming-text session's `text_idle_timeout`) | 408 | the server's | the client's text stopped coming |
| `internal`, `cancelled` | 500 | `internal_error` | |

The gateway's own refusals beside these: 429 `too_many_streams` / `too_many_bytes` with `Retry-After` (a client past
its caps, limits.py), 408 `request_timeout` (a body that did not arrive within the read timeout).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import grpc

from protocol.reasons import Ended, EndReason

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"
RATE_LIMIT = "rate_limit_error"
RETRY_AFTER_S = 1  # what a 503 asks a client to wait: the gateway has already tried its other servers
# Triton input names that the OpenAI request spells differently
_PARAMS = {"text": "input"}
# bad input whose code says more than 400 does: the voice registry's unknown name and taken name
_STATUS_BY_CODE = {"voice_not_found": 404, "voice_exists": 409, "admin_key_required": 403}


@dataclass(frozen=True)
class ApiError:
    """One error response: its HTTP status and OpenAI's `{"error": {...}}` fields."""

    status: int
    message: str
    type: str = INVALID_REQUEST
    param: str | None = None
    code: str | None = None
    retry_after_s: int | None = None  # the Retry-After header of a 503 or 429

    def to_json(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, INVALID_REQUEST, param, code)


def unavailable(message: str, code: str = "unavailable") -> ApiError:
    return ApiError(503, message, SERVER_ERROR, None, code, RETRY_AFTER_S)


def too_many(code: str, message: str) -> ApiError:
    """A client past its caps (limits.py): 429 with `Retry-After`, as OpenAI's rate limits answer."""
    return ApiError(429, message, RATE_LIMIT, None, code, RETRY_AFTER_S)


def request_timeout(timeout_s: float) -> ApiError:
    return ApiError(408, f"the request body did not arrive within {timeout_s:g} s (the gateway's read timeout)",
                    INVALID_REQUEST, None, "request_timeout")


def internal(message: str) -> ApiError:
    return ApiError(500, message, SERVER_ERROR, None, "internal_error")


def from_ended(ended: Ended) -> ApiError:
    """The error of a stream the server ended (its reason decides the status; see the table above)."""
    if ended.reason is EndReason.REFUSED_BAD_INPUT:
        return ApiError(_STATUS_BY_CODE.get(ended.code, 400), ended.message, INVALID_REQUEST,
                        _PARAMS.get(ended.param, ended.param), ended.code)
    if ended.reason.is_retryable_elsewhere:
        return unavailable(ended.message, code=ended.reason.value)
    if ended.reason is EndReason.CANCELLED and ended.code is not None:  # the server ended it for the client's fault
        return ApiError(408, ended.message, INVALID_REQUEST, None, ended.code)
    return internal(ended.message)


def from_grpc_error(error: grpc.aio.AioRpcError) -> ApiError:
    """The gRPC call itself failed: the server is down, restarting or gone (503), else 500."""
    text = f"triton {error.code().name}: {error.details()}"
    if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.RESOURCE_EXHAUSTED):
        return unavailable(text)
    return internal(text)


def load_json(raw: str | bytes) -> object:
    """`json.loads`, every failure a ValueError whose message says what is wrong: bad JSON (where), nesting too
    deep for the parser, a number of more digits than Python converts. Never a RecursionError (a 500)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at character {exc.pos}") from None
    except RecursionError:
        raise ValueError("it is nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError, or an integer past sys.get_int_max_str_digits()
        raise ValueError(str(exc).split(";")[0]) from None
