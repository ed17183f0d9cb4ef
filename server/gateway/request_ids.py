"""Request ids: one per HTTP request, so one request can be followed through the gateway, the router and the LM.

The id is the client's `X-Request-Id` when it sends a sane one (letters, digits and `-_.:+/=`, at most
MAX_REQUEST_ID_CHARS), else a fresh one. It goes back on every response (`X-Request-Id`), into every log line of
the gateway while the request is handled (`[id]`), and to Triton as the request id of the request's streams: the
router logs it beside the LM's stream id (backend_python/vox_ensemble/model.py), and the LM's lines name that.

Triton's request id is also what a stream's acks name, so among the streams live on a server it must be unique: a
stream takes the request's id as it is unless a recent stream of this gateway took it (a client that sends one id
on every call; a WebSocket's next utterance), then the id with a suffix (`id.2`, `id.3`, …).
"""
from __future__ import annotations

import contextvars
import itertools
import logging
import re
import time
import uuid
from collections import OrderedDict

from aiohttp import web

REQUEST_ID_HEADER = "X-Request-Id"
MAX_REQUEST_ID_CHARS = 128
_SANE = re.compile(r"[A-Za-z0-9._:+/=-]+")  # nothing that could break a log line or a header
_KEY = web.RequestKey("voxlane_request_id", str)
NO_REQUEST = "-"  # what a log line outside any request shows
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s [%(request_id)s] %(message)s"
current_id: contextvars.ContextVar[str] = contextvars.ContextVar("voxlane_request_id", default=NO_REQUEST)


def is_sane(value: str | None) -> bool:
    return value is not None and len(value) <= MAX_REQUEST_ID_CHARS and _SANE.fullmatch(value) is not None


def request_id_of(request: web.BaseRequest) -> str:
    """The request's id: its client's `X-Request-Id` if sane, else a fresh one (the same on every call)."""
    if _KEY not in request:
        given = request.headers.get(REQUEST_ID_HEADER)
        request[_KEY] = given if is_sane(given) else uuid.uuid4().hex
    return request[_KEY]


async def on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """Every response, streamed, WebSocket and error ones too, carries the request's id."""
    response.headers[REQUEST_ID_HEADER] = request_id_of(request)


class RequestIdFilter(logging.Filter):
    """Puts the id of the request being handled on each log record (`%(request_id)s`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_id.get()
        return True


def configure_logging(level: int = logging.INFO) -> None:
    """The gateway process's log: one line a record, each with its request's id."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.addFilter(RequestIdFilter())


class TritonIds:
    """The Triton request id of each stream: the HTTP request's id, suffixed while a stream of this gateway holds it
    or released it less than `memory_s` ago. A cancelled stream's id can outlive it on the server for a moment (the
    router ends it within a step or two), so a reused id is told apart for a while after its stream here ended."""

    def __init__(self, memory_s: float = 60.0, clock=time.monotonic) -> None:
        self._memory_s, self._clock = memory_s, clock
        self._live: set[str] = set()
        self._released: OrderedDict[str, float] = OrderedDict()  # id -> when its stream ended here, oldest first

    def take(self, request_id: str) -> str:
        """A Triton id for a new stream of request `request_id`; give it back with `release`."""
        self._forget_before(self._clock() - self._memory_s)
        candidates = itertools.chain((request_id,), (f"{request_id}.{n}" for n in itertools.count(2)))
        triton_id = next(c for c in candidates if c not in self._live and c not in self._released)
        self._live.add(triton_id)
        return triton_id

    def release(self, triton_id: str) -> None:
        self._live.discard(triton_id)
        self._released[triton_id] = self._clock()
        self._released.move_to_end(triton_id)

    def _forget_before(self, oldest: float) -> None:
        while self._released and next(iter(self._released.values())) < oldest:
            self._released.popitem(last=False)
