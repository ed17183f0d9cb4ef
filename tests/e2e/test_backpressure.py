"""Backpressure end to end (scheduler/flow.py) on a server with a 2 s bound and a 3 s stall timeout.

Clients that never read the gRPC stream (raw `ModelStreamInfer` calls whose responses are never
taken off the socket) would make `tritonserver` hold every chunk of their utterances. With the bound,
an acking client's stream stops at about the bound and is cancelled with a clear reason once its
client has taken nothing for the stall timeout; a client that does not ack is paced to real-time
playback. Meanwhile a client that reads gets its whole stream, in order.
"""
from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import serialize_byte_tensor

from server.compare import free_ports
from server.gateway.config import GatewayConfig
from server.gateway.server import GatewayProcess
from clients.live_stream import LiveStream
from clients.stream import build_inputs, synthesize
from protocol.models import ROUTER
from protocol.tensors import REQUEST_INPUTS, scalar_array
from protocol.reasons import EndReason
from protocol.wire import decode_error
from scheduler import FlowConfig
from tests.e2e.conftest import DEFAULT_PRESET, start_server
from tests.e2e.test_metrics import scrape
from tests.waiting import wait_for
from tools.procstats import snapshot, stat

BOUND_S, STALL_S = 2.0, 3.0
GATEWAY_WRITE_S = 2.0  # the gateway's write timeout here
NUM_SILENT_HTTP = 2  # each must fill loopback's buffers first: more would only cost the suite time
SAMPLE_RATE = 24_000
NUM_SILENT = 12  # never-reading clients, half of them acking
UTTERANCE_S = 60.0
# what all twelve would leave in tritonserver unbounded: 12 x 60 s of FP32 at 24 kHz, about 69 MB
MAX_GROWTH_KB = 24 * 1024
# the processes a stream's unread audio could pile up in; the codec lanes decode and return, holding
# none (their RSS is their allocator's high-water mark of the batch shapes met: see test_soak.py)
HOLDERS = ("tritonserver", "vox_ensemble", "speechlm_lm")


@pytest.fixture(scope="module")
def paced(model_cache, tmp_path_factory):
    srv = start_server(DEFAULT_PRESET, tmp_path_factory, flow=FlowConfig(BOUND_S, STALL_S))
    yield srv
    srv.stop(grace_s=0)


class SilentClient:
    """A raw gRPC stream whose responses nobody reads (until `drain`)."""

    def __init__(self, url: str, acks: bool, seconds: float = UTTERANCE_S) -> None:
        self._channel = grpc.insecure_channel(url)
        self._done = threading.Event()
        request = service_pb2.ModelInferRequest(model_name=ROUTER, id=uuid.uuid4().hex)
        for name, value in (("text", "A long story nobody listens to."), ("seed", 5), ("ignore_eos", True),
                            ("max_audio_seconds", seconds), ("client_acks", acks)):
            spec, array = REQUEST_INPUTS[name], scalar_array(name, value)
            request.inputs.add(name=name, datatype=spec.triton_type, shape=list(spec.shape))
            raw = serialize_byte_tensor(array).item() if spec.triton_type == "BYTES" else array.tobytes()
            request.raw_input_contents.append(raw)

        def requests():
            yield request
            self._done.wait()

        self.call = service_pb2_grpc.GRPCInferenceServiceStub(self._channel).ModelStreamInfer(requests())

    def drain(self, timeout_s: float = 30.0) -> tuple[float, str | None]:
        """Read what waited: (seconds of audio, the error message the stream ended with)."""
        audio_s, deadline = 0.0, time.monotonic() + timeout_s
        for response in self.call:
            if response.error_message:
                return audio_s, response.error_message
            outputs = [o.name for o in response.infer_response.outputs]
            if "audio" in outputs:
                raw = response.infer_response.raw_output_contents[outputs.index("audio")]
                audio_s += len(raw) / 4 / SAMPLE_RATE
            if time.monotonic() > deadline:
                break
        return audio_s, None

    def close(self) -> None:
        self._done.set()
        self.call.cancel()
        self._channel.close()


def test_an_acking_client_that_stops_acking_gets_the_bound_then_a_clear_stall(paced):
    stream = LiveStream(paced.grpc_url, build_inputs("Nobody acks this.", seed=2, ignore_eos=True,
                                                     max_audio_seconds=UTTERANCE_S, client_acks=True))
    outcome = stream.read(timeout_s=STALL_S + 20)  # it reads, but never acks
    stream.close()
    assert outcome.error is not None, "the stream ran to its end: nothing held it back"
    ended = decode_error(outcome.error)
    assert ended.reason is EndReason.CANCELLED and "acked no audio" in ended.message
    # it stops within the bound plus the chunk that reached it (chunks are at most 0.8 s here)
    assert outcome.num_samples / SAMPLE_RATE <= BOUND_S + 1.0
    assert outcome.is_in_order


def test_never_reading_clients_leave_every_process_bounded_and_a_reader_unharmed(paced):
    with ThreadPoolExecutor(NUM_SILENT) as pool:  # the lanes meet these batch sizes before the figures
        list(pool.map(lambda i: synthesize(paced.grpc_url, "Warm up.", seed=i, max_audio_seconds=2.0,
                                           ignore_eos=True), range(NUM_SILENT)))
    pid = paced.process.process.pid
    before = snapshot(pid)
    silent = [SilentClient(paced.grpc_url, acks=i % 2 == 0) for i in range(NUM_SILENT)]
    try:
        assert wait_for(lambda: scrape(paced)["voxlane_live_requests"] >= NUM_SILENT, timeout_s=30)
        reader = synthesize(paced.grpc_url, "I read every chunk.", seed=3, max_audio_seconds=4.0, ignore_eos=True)
        assert [c.index for c in reader.chunks] == list(range(len(reader.chunks)))
        assert reader.audio.size == round(4.0 * 12.5) * 1920
        # the acking ones stall out; the others are paced to playback, still live
        assert wait_for(lambda: scrape(paced)["voxlane_live_requests"] == NUM_SILENT // 2, timeout_s=STALL_S + 20)
        after = snapshot(pid)
        for name in HOLDERS:
            grown = after[name].rss_kb - before[name].rss_kb
            assert grown <= MAX_GROWTH_KB, f"{name} grew {grown} kB with {NUM_SILENT} clients not reading"
        for client in silent[::2]:
            audio_s, error = client.drain()
            assert error is not None and decode_error(error).reason is EndReason.CANCELLED, error
            assert audio_s <= BOUND_S + 1.0

    finally:
        for client in silent:
            client.close()
    assert wait_for(lambda: scrape(paced)["voxlane_live_requests"] == 0, timeout_s=10)


@pytest.fixture(scope="module")
def slow_gateway(paced, tmp_path_factory):
    config = GatewayConfig(tritons=(paced.grpc_url,), port=free_ports(1)[0], write_timeout_s=GATEWAY_WRITE_S)
    process = GatewayProcess(config, log_path=tmp_path_factory.mktemp("gateway") / "gateway.log")
    process.wait_ready(60)
    yield process
    process.stop()


def silent_http_request(gateway: GatewayProcess) -> socket.socket:
    """POST a long PCM stream with a tiny receive window, and never read the answer. Loopback's socket
    buffers still take about 3 MB (30 s of this audio) before the gateway's writes block."""
    body = json.dumps({"model": "tts-1", "input": "A long story nobody listens to.", "response_format": "pcm",
                       "sample_rate": 48_000, "seed": 7, "ignore_eos": True, "max_audio_seconds": 120.0}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((gateway.config.host, gateway.config.port))
    sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def test_the_gateway_drops_clients_that_take_no_bytes_and_their_streams_end(paced, slow_gateway):
    """HTTP clients that read nothing: the gateway stays bounded, drops each once its writes have
    blocked for the write timeout, and their Triton streams end (the gateway acks only what it wrote)."""
    rss_kb = lambda: stat("gateway", slow_gateway.process.pid).rss_kb  # noqa: E731
    before = rss_kb()
    sockets = [silent_http_request(slow_gateway) for _ in range(NUM_SILENT_HTTP)]
    try:
        assert wait_for(lambda: scrape(paced)["voxlane_live_requests"] >= 1, timeout_s=30)
        # each stream ends: its client took nothing for the write timeout, so the gateway dropped it
        assert wait_for(lambda: scrape(paced)["voxlane_live_requests"] == 0, timeout_s=GATEWAY_WRITE_S + 40)
        grown = rss_kb() - before
        assert grown <= MAX_GROWTH_KB, f"the gateway grew {grown} kB with {NUM_SILENT_HTTP} clients not reading"
    finally:
        for sock in sockets:
            sock.close()
