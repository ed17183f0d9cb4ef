"""The gateway's state: its Triton servers (static, or a DNS name's: membership.py), their gRPC channels, the models
they serve (catalog.py), the balancer and the streams it relays."""
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

import aiohttp
import grpc
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc

from server.gateway.balancer import Backend, Balancer
from server.gateway.catalog import Catalog, build_catalog
from server.gateway.config import GatewayConfig
from server.gateway.limits import ClientTable, Lease
from server.gateway.dns_watch import DnsWatch
from server.gateway.membership import Membership, MembershipChange
from protocol.admin import ADMIN_KEY_PARAMETER
from server.gateway.errors import ApiError, bad_request, from_ended, from_grpc_error, unavailable
from server.gateway.readiness import Probe, probe
from server.gateway.resolver import DnsResolver, HostPort
from server.gateway.server_settings import ServerSettings, server_settings
from server.gateway.request_ids import TritonIds
from server.gateway.speech import GatewaySpeechRequest, parse_speech
from server.gateway.stats import GatewayStats
from server.gateway.triton_session import SessionEvent, SessionText, TritonSession
from server.gateway.triton_stream import AudioChunk, StreamFailure, stream_chunks
from server.gateway.voices import REFERENCE_UNSUPPORTED, copy_missing_voices
from protocol.metrics import parse_live
from protocol.reasons import EndReason
from protocol.reference import ReferenceLimits
from protocol.wire import decode_error

log = logging.getLogger("voxlane.gateway")
# a server that restarts is reached again within a few seconds (gRPC's default backoff grows to 120 s)
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024),
                    ("grpc.initial_reconnect_backoff_ms", 250), ("grpc.max_reconnect_backoff_ms", 2000)]


MAX_CONCURRENT_DECODES = 2
_NUM_SHOWN = 8  # addresses a warning names (of the DNS answer's past --max-servers)


class Gateway:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        metrics = config.metrics_urls or (None,) * len(config.tritons)
        self.balancer = Balancer([Backend(url, m) for url, m in zip(config.tritons, metrics)], config.down_s)
        self.membership = Membership(self.balancer, self._dns_metrics_url, config.forget_after_s,
                                     max_servers=config.max_servers)
        self.dns_names = tuple(HostPort.parse(name) for name in config.triton_dns)
        self.dns = DnsWatch(DnsResolver(config.dns_server), self.membership, config.dns_interval_s,
                            self._on_membership, self._close) if self.dns_names else None
        self.stats = GatewayStats()
        self.clients = ClientTable(config.client_caps)  # what each client holds (limits.py)
        # reference files decoded at once, each in a worker thread: a large or hostile upload never stalls the
        # event loop, and a burst of them holds a bounded amount of memory
        self.decoders = asyncio.Semaphore(MAX_CONCURRENT_DECODES)
        self.catalog = Catalog()  # the models the member servers serve (catalog.py)
        self.model_ids: tuple[str, ...] = ()  # the catalog's ids, the default model's first
        self.triton_ids = TritonIds()
        self.server_info: ServerSettings | None = None  # the first server's that answered (start)
        self.reference_limits = ReferenceLimits()  # the first server's own, once it answered (start)
        self._models_seen: dict[str, None] = {}  # every served model learned, in the order learned
        self._channels: dict[str, list[grpc.aio.Channel]] = {}
        self._turn = itertools.count()
        self._tasks: list[asyncio.Task] = []  # scraping, readiness polls, DNS watches
        self._syncs: set[asyncio.Task] = set()  # voices being copied to a server that lacks them
        # set when a server's router is seen unloaded (its process died): the streams in flight on it end
        self._router_lost: dict[str, asyncio.Event] = {}
        for backend in self.balancer.backends:
            self._open(backend)

    async def start(self) -> None:
        """Resolve the DNS names, learn the served model from a first server that answers, then poll each server's
        readiness (learning its model), scrape its metrics and watch the names."""
        await self._discover()
        await self.poll_readiness()
        for backend in self.balancer.backends:
            if backend.is_ready:
                self._sync_voices_to(backend)
        self._tasks = [asyncio.create_task(self._scrape_forever()), asyncio.create_task(self._poll_readiness_forever()),
                       *(asyncio.create_task(self.dns.watch_forever(name)) for name in self.dns_names)]

    async def close(self) -> None:
        for task in (*self._tasks, *self._syncs):
            task.cancel()
        for channels in self._channels.values():
            for channel in channels:
                await channel.close()

    def _open(self, backend: Backend) -> None:
        """A server new to the gateway: its router's watch (its channels open at its first call, `_stub`)."""
        self._router_lost[backend.url] = asyncio.Event()

    def _on_membership(self, change: MembershipChange) -> None:
        for backend in change.joined:
            self._open(backend)
            log.warning("server %s joined; it takes streams once ready", backend.url)
        for backend in change.left:
            log.warning("server %s left DNS: it takes no new stream; its %d live stream(s) finish there",
                        backend.url, backend.num_live)
        for backend in change.returned:
            log.warning("server %s is back in DNS", backend.url)
        if change.over_cap:
            shown = ", ".join(change.over_cap[:_NUM_SHOWN]) + (", ..." if len(change.over_cap) > _NUM_SHOWN else "")
            log.warning("the DNS names answer %d server(s) past --max-servers %d; not added: %s",
                        len(change.over_cap), self.config.max_servers, shown)
        elif change.over_cap is not None:
            log.warning("every server the DNS names answer fits --max-servers %d again", self.config.max_servers)

    def _dns_metrics_url(self, url: str) -> str | None:
        """A DNS server's metrics URL: its address at `--metrics-port` (none where that is 0)."""
        port = self.config.triton_metrics_port
        host = url.rpartition(":")[0]  # an IPv6 address keeps its brackets
        return f"http://{host}:{port}/metrics" if port else None

    async def _close(self, backend: Backend) -> None:
        """A server forgotten (membership.forget): it holds no stream, and its channels close."""
        self._router_lost.pop(backend.url, None)
        self._refresh_catalog()
        for channel in self._channels.pop(backend.url, ()):
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
        model = self._served_model(request.model)
        last_error: ApiError = unavailable(f"no Triton server of {request.model} is ready" if model
                                           else "no Triton server is ready")
        while (len(tried) < self.config.max_attempts
               and (backend := self.balancer.acquire(model, exclude=tried)) is not None):
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

    def _served_model(self, model_id: str) -> str | None:
        """The served model a request's `model` goes to; None: any server (no server's model is known yet)."""
        if not self.catalog.ids_by_model:
            return None
        return self.catalog.model_of(model_id) or model_id  # a model gone since the request's check: no server

    def _registry_servers(self) -> list[Backend]:
        return [b for b in self.balancer.backends if b.is_ready and b.is_member]

    async def call_voice_registry(self, proto: service_pb2.ModelInferRequest) -> list[dict | ApiError]:
        """`proto` to the `voice_registry` of every ready member server at once: each one's JSON answer or error
        (none when no server is ready)."""
        backends = self._registry_servers()
        return list(await asyncio.gather(*(self._call_voice_registry(b, proto) for b in backends)))

    async def register_voice(self, proto: service_pb2.ModelInferRequest) -> list[dict | ApiError]:
        """A register to the ready servers whose model clones voices: each encodes the reference for its own model.
        A server that answers `reference_unsupported` clones none, and gets no register until it restarts."""
        ready = self._registry_servers()
        backends = [b for b in ready if b.clones_voices]
        if ready and not backends:
            return [bad_request("no model this gateway serves clones a voice", param="file",
                                code=REFERENCE_UNSUPPORTED)]
        answers = list(await asyncio.gather(*(self._call_voice_registry(b, proto) for b in backends)))
        for backend, answer in zip(backends, answers):
            if isinstance(answer, ApiError) and answer.code == REFERENCE_UNSUPPORTED:
                backend.clones_voices = False
        return answers

    def _sync_voices_to(self, backend: Backend) -> None:
        """In the background: copy to `backend` the registered voices the other ready servers of its model have and
        it lacks (a voice is encoded for one model)."""
        sources = [b for b in self._registry_servers() if b is not backend and b.model == backend.model]
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
        channels = self._channels.get(backend.url)
        if channels is None:  # opened in the event loop that uses them
            channels = self._channels[backend.url] = [
                grpc.aio.insecure_channel(backend.url, options=_CHANNEL_OPTIONS)
                for _ in range(self.config.channels_per_server)]
        return service_pb2_grpc.GRPCInferenceServiceStub(channels[next(self._turn) % len(channels)])

    async def _discover(self) -> None:
        """Wait for a first server (of the `--triton` ones, or the DNS names' addresses) to say what it serves. The
        names, then the servers, are asked all at once (a dead server delays none of the others); the servers that
        answered are learned in their order, the first of them giving the default model."""
        deadline = asyncio.get_running_loop().time() + self.config.startup_timeout_s
        while True:
            await asyncio.gather(*(self.dns.resolve(name) for name in self.dns_names))
            backends = list(self.balancer.backends)
            answers = await asyncio.gather(*(server_settings(b.url) for b in backends))
            for backend, settings in zip(backends, answers):
                if settings is not None:
                    self._learn(backend, settings)
            if any(answers):
                return
            if asyncio.get_running_loop().time() > deadline:
                servers = ", ".join((*self.config.tritons, *self.config.triton_dns))
                raise RuntimeError(f"no Triton server answered within {self.config.startup_timeout_s:g} s: {servers}")
            await asyncio.sleep(0.5)

    def _learn(self, backend: Backend, settings: ServerSettings) -> None:
        """What `backend` serves, as it said (a server that restarted may serve another model)."""
        if backend.model != settings.model:
            log.warning("server %s serves %s", backend.url, settings.model)
        backend.model, backend.clones_voices = settings.model, True
        if self.server_info is None:
            self.server_info, self.reference_limits = settings, settings.reference_limits
        self._models_seen.setdefault(settings.model)
        self._refresh_catalog()

    def _refresh_catalog(self) -> None:
        """The models of the gateway's servers. A model stays while a server of it is known, even one that left DNS
        (until it is forgotten): a request for it meanwhile is a 503 (no server ready), never a 404 because its
        pods were being replaced."""
        served = {b.model for b in self.balancer.backends}
        self.catalog = build_catalog((m for m in self._models_seen if m in served), self.config.default_model,
                                     self.config.model_name, self.config.served_model_names)
        self.model_ids = self.catalog.ids

    def health(self) -> dict:
        """Each server's readiness (as the background poll last saw it: a probe of the gateway asks no server),
        model and load; `ok` when at least one member is ready."""
        backends = list(self.balancer.backends)
        servers = [{"url": b.url, "ready": b.is_ready, "member": b.is_member, "model": b.model,
                    "live_streams": b.num_live, "reported_live": b.reported_live, "external_live": b.external_live,
                    "streams_started": b.num_started} for b in backends]
        return {"status": "ok" if any(b.is_ready and b.is_member for b in backends) else "unavailable",
                "model": self.model_ids[0] if self.model_ids else None, "models": list(self.catalog.ids_by_model),
                "mode": self.server_info.mode if self.server_info else None, "servers": servers}

    async def poll_readiness(self) -> None:
        """Ask every server whether it can take a new stream (readiness.py), and one that turns ready what it
        serves; the balancer skips those that cannot until a later poll says they can."""
        backends = list(self.balancer.backends)
        probes = await asyncio.gather(*(probe(b.url) for b in backends))
        settings = await asyncio.gather(*(self._settings_if_new(b, p) for b, p in zip(backends, probes)))
        for backend, answer, learned in zip(backends, probes, settings):
            if backend.url not in self._router_lost:
                continue  # forgotten (membership) while it was asked: its answer is of no server of ours
            if learned is not None:
                self._learn(backend, learned)
            self._on_probe(backend, answer)

    async def _settings_if_new(self, backend: Backend, answer: Probe) -> ServerSettings | None:
        """A server that turns ready, or whose model is not known yet, is asked what it serves."""
        if answer.can_serve and (not backend.is_ready or backend.model is None):
            return await server_settings(backend.url)
        return None

    def _on_probe(self, backend: Backend, answer: Probe) -> None:
        is_ready, lost = answer.can_serve, self._router_lost[backend.url]
        if answer.router_unloaded and not lost.is_set():
            log.warning("server %s: its router is unloaded; its streams in flight end", backend.url)
            lost.set()
        elif is_ready and lost.is_set():
            self._router_lost[backend.url] = asyncio.Event()  # a new router: new streams watch it
        if backend.is_ready != is_ready:
            log.warning("server %s is %s", backend.url, "ready" if is_ready else "not ready")
        if is_ready and not backend.is_ready and backend.is_member:
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
        timeout_s = max(1.0, self.config.scrape_interval_s)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
            while True:
                try:
                    await self.scrape(session, timeout_s)
                except Exception:  # one failed round must not end the scrapes
                    log.exception("scraping the servers' metrics failed")
                await asyncio.sleep(self.config.scrape_interval_s)

    async def scrape(self, session: aiohttp.ClientSession, timeout_s: float) -> None:
        """Every server's metrics read at once, each within `timeout_s`: a dead server delays no other's figures."""
        backends = [b for b in self.balancer.backends if b.metrics_url]
        results = await asyncio.gather(*(self._scrape(session, b, timeout_s) for b in backends),
                                       return_exceptions=True)  # one server's failure ends no other's scrape
        for backend, result in zip(backends, results):
            if isinstance(result, Exception):
                log.warning("server %s: its metrics could not be read: %r", backend.url, result)

    async def _scrape(self, session: aiohttp.ClientSession, backend: Backend, timeout_s: float) -> None:
        live = await scrape_live(session, backend.metrics_url, timeout_s)
        if live is not None:  # taken as it comes: the estimate is of the gateway's own count at that moment
            self.balancer.on_scrape(backend, live)


async def scrape_live(session: aiohttp.ClientSession, url: str, timeout_s: float | None = None) -> int | None:
    """The server's `voxlane_live_requests`; None if it cannot be read (within `timeout_s`, where given)."""
    try:
        text = await asyncio.wait_for(_text_of(session, url), timeout_s)
    except (aiohttp.ClientError, asyncio.TimeoutError, UnicodeDecodeError):
        return None
    return parse_live(text)


async def _text_of(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as response:
        return await response.text()


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
