"""The gateway's state: its Triton servers, their gRPC channels, the balancer and the streams it relays."""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path

import aiohttp
import grpc
import tritonclient.grpc.aio as grpcaio
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from clients.gateway.balancer import Backend, Balancer
from clients.gateway.config import GatewayConfig
from clients.gateway.limits import ClientTable, Lease
from protocol.admin import ADMIN_KEY_PARAMETER
from clients.gateway.errors import ApiError, from_ended, from_grpc_error, unavailable
from clients.gateway.readiness import PROBE_TIMEOUT_S, can_serve, probe
from clients.gateway.request_ids import TritonIds
from clients.gateway.speech import GatewaySpeechRequest, parse_speech
from clients.gateway.stats import GatewayStats
from clients.gateway.triton_session import SessionEvent, SessionText, TritonSession
from clients.gateway.triton_stream import AudioChunk, StreamFailure, stream_chunks
from clients.gateway.voices import copy_missing_voices
from protocol.metrics import parse_live
from protocol.models import LM, ROUTER
from protocol.reasons import EndReason
from protocol.reference import ReferenceLimits
from protocol.wire import decode_error

log = logging.getLogger("voxlane.gateway")
# a server that restarts is reached again within a few seconds (gRPC's default backoff grows to 120 s)
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024),
                    ("grpc.initial_reconnect_backoff_ms", 250), ("grpc.max_reconnect_backoff_ms", 2000)]


MAX_CONCURRENT_DECODES = 2


class Gateway:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        metrics = config.metrics_urls or (None,) * len(config.tritons)
        self.balancer = Balancer([Backend(url, m) for url, m in zip(config.tritons, metrics)], config.down_s)
        self.stats = GatewayStats()
        self.clients = ClientTable(config.client_caps)  # what each client holds (limits.py)
        # reference files decoded at once, each in a worker thread: a large or hostile upload never stalls the
        # event loop, and a burst of them holds a bounded amount of memory
        self.decoders = asyncio.Semaphore(MAX_CONCURRENT_DECODES)
        self.model_ids: tuple[str, ...] = ()
        self.triton_ids = TritonIds()
        self.server_info: dict = {}
        self.reference_limits = ReferenceLimits()  # the first server's own, once it answered (start)
        self._channels: dict[str, list[grpc.aio.Channel]] = {}
        self._turn = itertools.count()
        self._scraper: asyncio.Task | None = None
        self._readiness: asyncio.Task | None = None
        self._syncs: set[asyncio.Task] = set()  # voices being copied to a server that lacks them
        # set when a server's router is seen unloaded (its process died): the streams in flight on it end
        self._router_lost: dict[str, asyncio.Event] = {b.url: asyncio.Event() for b in self.balancer.backends}

    async def start(self) -> None:
        """Open the channels, learn the served model from a first server that answers, start scraping."""
        for backend in self.balancer.backends:
            self._channels[backend.url] = [grpc.aio.insecure_channel(backend.url, options=_CHANNEL_OPTIONS)
                                           for _ in range(self.config.channels_per_server)]
        self.server_info = await self._discover()
        self.model_ids = model_ids(self.server_info["model"], self.config.model_name, self.config.served_model_names)
        self.reference_limits = self.server_info["reference_limits"]
        if any(b.metrics_url for b in self.balancer.backends):
            self._scraper = asyncio.create_task(self._scrape_forever())
        await self.poll_readiness()
        for backend in self.balancer.backends:
            if backend.is_ready:
                self._sync_voices_to(backend)
        self._readiness = asyncio.create_task(self._poll_readiness_forever())

    async def close(self) -> None:
        for task in (self._scraper, self._readiness, *self._syncs):
            if task:
                task.cancel()
        for channels in self._channels.values():
            for channel in channels:
                await channel.close()

    async def parse_speech(self, body: object) -> GatewaySpeechRequest | ApiError:
        """`speech.parse_speech` of a request body; one with reference audio decodes it off the event loop."""
        if not (isinstance(body, dict) and body.get("ref_audio") is not None):
            return parse_speech(body, self.model_ids)
        async with self.decoders:
            return await asyncio.to_thread(parse_speech, body, self.model_ids, self.reference_limits)

    def stream_speech(self, request: GatewaySpeechRequest, lease: Lease | None = None) -> AsyncIterator[AudioChunk]:
        """The request's chunks from the least loaded ready server; before any audio, a 503 (overloaded,
        a lane down, stopping, unreachable) is tried once more on another server (`max_attempts`). A
        server that is unreachable or has a lane down is skipped for `down_s` after. The audio waiting for the
        client is charged to its `lease` (limits.py)."""
        return self._failover(request, lambda stub, req: stream_chunks(stub, req, self.config.request_timeout_s, lease))

    def speak_text(self, request: GatewaySpeechRequest, text: SessionText) -> AsyncIterator[SessionEvent]:
        """A streaming-text session's events (its chunks and refused pieces), its text taken from `text`
        as the client writes it. Placed and moved as `stream_speech` is: a 503 before the client has
        seen any event starts the session again on another server with the pieces so far."""
        return self._failover(request, lambda stub, req: TritonSession(stub, req, text,
                                                                      self.config.request_timeout_s).events())

    async def _failover(self, request: GatewaySpeechRequest,
                        open_stream: Callable[[object, GatewaySpeechRequest], AsyncIterator]) -> AsyncIterator:
        """The events of the request's stream (`open_stream(stub, request)`), its Triton id one that no recent
        stream of this gateway had (request_ids.py)."""
        triton_id = self.triton_ids.take(request.request_id or uuid.uuid4().hex)
        if request.request_id is not None and triton_id != request.request_id:
            log.info("its stream's Triton request id is %s (the id was taken by a recent stream)", triton_id)
        try:
            async with aclosing(self._on_servers(replace(request, request_id=triton_id), open_stream)) as events:
                async for event in events:
                    yield event
        finally:
            self.triton_ids.release(triton_id)

    async def _on_servers(self, request: GatewaySpeechRequest,
                          open_stream: Callable[[object, GatewaySpeechRequest], AsyncIterator]) -> AsyncIterator:
        """The events of `open_stream(stub, request)` on one server after another while each refuses before its
        first."""
        tried: tuple[Backend, ...] = ()
        last_error: ApiError = unavailable("no Triton server is ready")
        while len(tried) < self.config.max_attempts and (backend := self.balancer.acquire(exclude=tried)) is not None:
            tried += (backend,)
            has_events = False
            try:
                async with aclosing(open_stream(self._stub(backend), request)) as events:
                    async for event in _until_lost(events, self._router_lost[backend.url], backend.url):
                        has_events = True
                        yield event
                return
            except StreamFailure as exc:
                if has_events or exc.error.status != 503:
                    raise
                if exc.is_connection or exc.reason is EndReason.LANE_DOWN:
                    self.balancer.mark_down(backend)
                last_error = exc.error
                log.warning("server %s refused a stream: %s", backend.url, exc.error.message)
            finally:
                self.balancer.release(backend)
        raise StreamFailure(last_error)

    async def call_voice_registry(self, proto: service_pb2.ModelInferRequest) -> list[dict | ApiError]:
        """`proto` to the `voice_registry` of every ready server at once: each one's JSON answer or error
        (none when no server is ready)."""
        backends = [b for b in self.balancer.backends if b.is_ready]
        return list(await asyncio.gather(*(self._call_voice_registry(b, proto) for b in backends)))

    def _sync_voices_to(self, backend: Backend) -> None:
        """In the background: copy to `backend` the registered voices the other ready servers have and it lacks."""
        sources = [b for b in self.balancer.backends if b is not backend and b.is_ready]
        task = asyncio.create_task(self._sync_voices(backend, sources))
        self._syncs.add(task)
        task.add_done_callback(self._syncs.discard)

    async def _sync_voices(self, backend: Backend, sources: list[Backend]) -> None:
        try:
            copied = await copy_missing_voices(self._call_voice_registry, backend, sources)
        except Exception:  # a failed sync must not end the gateway; the next readiness change tries again
            log.exception("copying voices to %s failed", backend.url)
            return
        if copied:
            log.warning("copied %d registered voice(s) to %s: %s", len(copied), backend.url, ", ".join(copied))

    async def _call_voice_registry(self, backend: Backend, proto: service_pb2.ModelInferRequest) -> dict | ApiError:
        if self.config.keys.admin:  # the caller's key was checked here (auth.py); the server checks the gateway's
            proto.parameters[ADMIN_KEY_PARAMETER].string_param = min(self.config.keys.admin)
        try:
            response = await self._stub(backend).ModelInfer(proto, timeout=self.config.registry_timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return from_grpc_error(exc)
            return from_ended(decode_error(exc.details() or ""))  # the registry's coded answer, or Triton's own
        return json.loads(InferResult(response).as_numpy("voices")[0])

    def _stub(self, backend: Backend) -> service_pb2_grpc.GRPCInferenceServiceStub:
        channels = self._channels[backend.url]
        return service_pb2_grpc.GRPCInferenceServiceStub(channels[next(self._turn) % len(channels)])

    async def _discover(self) -> dict:
        deadline = asyncio.get_running_loop().time() + self.config.startup_timeout_s
        while True:
            for backend in self.balancer.backends:
                info = await server_settings(backend.url)
                if info is not None:
                    return info
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"no Triton server answered within {self.config.startup_timeout_s:g} s: "
                                   f"{', '.join(self.config.tritons)}")
            await asyncio.sleep(0.5)

    async def health(self) -> dict:
        """Each server's readiness and load; `ok` when at least one is ready."""
        ready = await asyncio.gather(*(can_serve(b.url) for b in self.balancer.backends))
        servers = [{"url": b.url, "ready": r, "live_streams": b.num_live, "reported_live": b.reported_live,
                    "external_live": b.external_live, "streams_started": b.num_started}
                   for b, r in zip(self.balancer.backends, ready)]
        return {"status": "ok" if any(ready) else "unavailable", "model": self.model_ids[0],
                "mode": self.server_info.get("mode"), "servers": servers}

    async def poll_readiness(self) -> None:
        """Ask every server whether it can take a new stream (readiness.py); the balancer skips those
        that cannot until a later poll says they can."""
        probes = await asyncio.gather(*(probe(b.url) for b in self.balancer.backends))
        for backend, answer in zip(self.balancer.backends, probes):
            is_ready, lost = answer.can_serve, self._router_lost[backend.url]
            if answer.router_unloaded and not lost.is_set():
                log.warning("server %s: its router is unloaded; its streams in flight end", backend.url)
                lost.set()
            elif is_ready and lost.is_set():
                self._router_lost[backend.url] = asyncio.Event()  # a new router: new streams watch it
            if backend.is_ready != is_ready:
                log.warning("server %s is %s", backend.url, "ready again" if is_ready else "not ready")
            if is_ready and not backend.is_ready:
                self._sync_voices_to(backend)  # it may have missed registers, or restarted on an empty directory
            backend.is_ready = is_ready

    async def _poll_readiness_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.readiness_interval_s)
            try:
                await self.poll_readiness()
            except Exception:  # one failed poll must not end the polling
                log.exception("readiness poll failed")

    async def _scrape_forever(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(1.0, self.config.scrape_interval_s))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                for backend in self.balancer.backends:
                    if backend.metrics_url:
                        live = await scrape_live(session, backend.metrics_url)
                        if live is not None:
                            self.balancer.on_scrape(backend, live)
                await asyncio.sleep(self.config.scrape_interval_s)


async def server_settings(url: str) -> dict | None:
    """The served model and mode from the server's model configs; None if it does not answer yet."""
    client = grpcaio.InferenceServerClient(url=url)
    try:
        router = await client.get_model_config(ROUTER, as_json=True, client_timeout=PROBE_TIMEOUT_S)
        lm = await client.get_model_config(LM, as_json=True, client_timeout=PROBE_TIMEOUT_S)
    except InferenceServerException:
        return None
    finally:
        await client.close()
    return {"model": _parameter(lm, "model") or "voxlane", "mode": _parameter(router, "mode"),
            "device": _parameter(lm, "device"),
            "reference_limits": ReferenceLimits.from_parameters(_parameters(router))}


def _parameter(config: dict, key: str) -> str | None:
    return _parameters(config).get(key)


def _parameters(config: dict) -> dict[str, str]:
    """A model config's parameters as strings (what the server was rendered with)."""
    params = config.get("config", config).get("parameters", {})
    return {key: value.get("string_value") for key, value in params.items() if "string_value" in value}


async def scrape_live(session: aiohttp.ClientSession, url: str) -> int | None:
    """The server's `voxlane_live_requests`; None if it cannot be read."""
    try:
        async with session.get(url) as response:
            text = await response.text()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None
    return parse_live(text)


_END = object()


async def _until_lost(events: AsyncIterator, lost: asyncio.Event, url: str) -> AsyncIterator:
    """`events` until they end, or until `lost` is set: the server's router died (its process held the stream's
    Triton responses, which will never come), a 503 `router_restarted`; before any event the stream is tried
    on another server."""
    waiter = asyncio.ensure_future(lost.wait())
    following: asyncio.Future | None = None
    try:
        while True:
            following = asyncio.ensure_future(anext(events, _END))
            await asyncio.wait({following, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                raise StreamFailure(unavailable(f"server {url}: its router (vox_ensemble) was unloaded (its process "
                                                "died, or the server is stopping), and this stream with it; retry",
                                                code="router_restarted"))
            event = following.result()
            if event is _END:
                return
            yield event
    finally:  # also when the client went away (this generator is cancelled): the pending read goes with it
        waiter.cancel()
        if following is not None and not following.done():
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await following


def model_ids(served: str, model_name: str | None, aliases: tuple[str, ...]) -> tuple[str, ...]:
    """The ids a request may name the model by, the first one listed first: `model_name` (else the served
    model's own name), the `--served-model-name` aliases, and the served model's whole id (a checkpoint's path
    or Hugging Face id, e.g. `Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice`, beside its last part)."""
    whole = served if not served.startswith(("/", ".")) else None  # a hub id, not a directory on this machine
    ids = (model_name or Path(served).name, *aliases, Path(served).name, whole)
    return tuple(dict.fromkeys(i for i in ids if i))
