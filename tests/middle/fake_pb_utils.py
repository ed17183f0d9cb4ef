"""A small fake of Triton's `triton_python_backend_utils`, enough to run the Triton models in-process.

BLS calls (`InferenceRequest.exec`) go to the handlers that a test registers on `SERVER` by model
name, so the router can be driven against fake lanes, or against the real LM glue. Metrics record
their values; model control calls are recorded on `SERVER`.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Callable

import numpy as np

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


class Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class TritonError:
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class TritonModelException(Exception):
    """What the Python backend's model control raises (a model it cannot load)."""


class InferenceResponse:
    def __init__(self, output_tensors: list | None = None, error: TritonError | None = None) -> None:
        self._tensors, self._error = list(output_tensors or []), error

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def output_tensors(self) -> list:
        return self._tensors


def _by_name(tensors: list, name: str) -> Tensor | None:
    return next((t for t in tensors if t.name() == name), None)


def get_input_tensor_by_name(request, name: str) -> Tensor | None:
    return _by_name(request.inputs(), name)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return _by_name(response.output_tensors(), name)


class ResponseSender:
    """Records what a model sends; `cancel()` plays the client going away."""

    def __init__(self) -> None:
        self.sent: list[tuple[InferenceResponse | None, int]] = []
        self.is_final = threading.Event()
        self._is_cancelled = False
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        with self._lock:
            assert not self.is_final.is_set(), "a response after the final flag"
            self.sent.append((response, flags))
        if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.is_final.set()

    def is_cancelled(self) -> bool:
        assert not self.is_final.is_set(), "is_cancelled after the final flag (crashed tritonserver)"
        return self._is_cancelled

    def cancel(self) -> None:
        self._is_cancelled = True

    @property
    def responses(self) -> list[InferenceResponse]:
        return [response for response, _ in self.sent if response is not None]


class Request:
    """A request as `execute` receives it."""

    def __init__(self, inputs: list[Tensor], parameters: dict | None = None, request_id: str = "",
                 correlation_id: int | str = 0, flags: int = 0) -> None:
        self._inputs, self._parameters, self._id = inputs, json.dumps(parameters or {}), request_id
        self._correlation_id, self._flags = correlation_id, flags  # a Triton sequence's id and start/end flags
        self.sender = ResponseSender()

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def parameters(self) -> str:
        return self._parameters

    def request_id(self) -> str:
        return self._id

    def get_response_sender(self) -> ResponseSender:
        return self.sender


Handler = Callable[[Request, bool], list[InferenceResponse]]  # (request, decoupled) -> its responses


class FakeServer:
    """The models that BLS calls reach, and the model control calls made."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.unloaded: list[str] = []
        self.loaded: list[str] = []
        self.ready: dict[str, bool] = {}
        self.on_load: Callable[[str], None] = lambda model: None  # a load starts a fresh stub (or raises)
        self.unload_takes_s = 0.0  # how long readiness keeps saying ready after an unload
        self.ready_until: dict[str, float] = {}

    def reset(self) -> None:
        self.__init__()


SERVER = FakeServer()


class InferenceRequest:
    def __init__(self, model_name: str, requested_output_names: list, inputs: list, request_id: str = "",
                 parameters: dict | None = None, **_) -> None:
        self.model_name = model_name
        self.request = Request(inputs, parameters, request_id)

    def exec(self, decoupled: bool = False):
        responses = SERVER.handlers[self.model_name](self.request, decoupled)
        return iter(responses) if decoupled else responses[0]


def unload_model(model_name: str) -> None:
    SERVER.unloaded.append(model_name)
    SERVER.ready[model_name] = False
    SERVER.ready_until[model_name] = time.monotonic() + SERVER.unload_takes_s


def load_model(model_name: str, config: str = "", files: dict | None = None) -> None:
    """Triton 2.51's trap: a load while the unload has not shown yet leaves the dead model in place."""
    SERVER.loaded.append(model_name)
    if time.monotonic() < SERVER.ready_until.get(model_name, 0.0):
        return
    SERVER.on_load(model_name)
    SERVER.ready[model_name] = True


def is_model_ready(model_name: str) -> bool:
    return SERVER.ready.get(model_name, True) or time.monotonic() < SERVER.ready_until.get(model_name, 0.0)


class _Metric:
    def __init__(self, labels: dict, buckets: list | None = None) -> None:
        self.labels, self.value, self.observations = labels, 0.0, []

    def increment(self, value: float) -> None:
        self.value += value

    def set(self, value: float) -> None:
        self.value = value

    def observe(self, value: float) -> None:
        self.observations.append(value)


class MetricFamily:
    COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.name, self.metrics = name, []

    def Metric(self, labels: dict, buckets: list | None = None) -> _Metric:  # noqa: N802 (Triton's name)
        metric = _Metric(labels, buckets)
        self.metrics.append(metric)
        return metric
