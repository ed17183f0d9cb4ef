"""No client harms the others through the gateway (server/gateway/limits.py, app.py): a connection whose headers
trickle in (slowloris) or whose body stops half-way is closed within the read timeout; a client past its caps of
streams or bytes gets a 429 with `Retry-After` at once; and beside 200 clients that read nothing, an ordinary request
from another address gets its audio soon, while the slow ones are dropped. Against a real tritonserver, with a
gateway whose caps and timeouts are small (so the module runs in seconds)."""
from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.request

import pytest

from server.compare import free_ports
from server.gateway.config import GatewayConfig
from server.gateway.limits import ClientCaps
from server.gateway.server import GatewayProcess
from tests.e2e.conftest import DEFAULT_PRESET, start_server
from tests.e2e.test_metrics import scrape
from tests.waiting import wait_for

READ_TIMEOUT_S, WRITE_TIMEOUT_S = 2.0, 5.0
CAPS = ClientCaps(max_streams_per_key=16, max_streams_per_address=16)
SMALL_BYTES = ClientCaps(max_bytes=4 << 20)
OTHER_ADDRESS = "127.0.0.2"  # loopback takes any 127.x source: another client
SPEECH = {"model": DEFAULT_PRESET, "input": "Hi.", "voice": "tiny", "response_format": "pcm", "seed": 1,
          "ignore_eos": True}
FIRST_AUDIO_S = 3.0  # a generous bound on an ordinary request's first audio (it took 15-28 s beside slow readers)


@pytest.fixture(scope="module")
def fair(model_cache, tmp_path_factory):
    """A server, a gateway with small caps and timeouts in front of it, and one whose byte cap is small."""
    srv = start_server(DEFAULT_PRESET, tmp_path_factory)
    gateways = []
    try:
        for caps in (CAPS, SMALL_BYTES):
            config = GatewayConfig(tritons=(srv.grpc_url,), port=free_ports(1)[0], read_timeout_s=READ_TIMEOUT_S,
                                   write_timeout_s=WRITE_TIMEOUT_S, client_caps=caps)
            gateways.append(GatewayProcess(config, log_path=tmp_path_factory.mktemp("gateway") / "gateway.log"))
            gateways[-1].wait_ready(60)
        yield srv, gateways[0], gateways[1]
    finally:
        for gateway in gateways:
            gateway.stop()
        srv.stop(grace_s=0)


def request_head(body: bytes, length: int | None = None) -> bytes:
    return (b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length))


async def connect(port: int, source: str = "127.0.0.1", receive_buffer: int | None = None):
    """A connection from `source`; a small `receive_buffer` makes a client that reads nothing really take nothing."""
    sock = socket.socket()
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.bind((source, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock)


async def is_closed_within(reader, seconds: float) -> bool:
    """Whether the other end closes the connection within `seconds` (whatever it sent before)."""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass
        return True
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def status_of(reader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1])


async def first_audio_s(port: int, source: str, seconds: float = 1.0) -> tuple[int, float, dict]:
    """(status, seconds to its first audio bytes or its error, headers) of one ordinary request from `source`."""
    body = json.dumps({**SPEECH, "max_audio_seconds": seconds}).encode()
    started = time.monotonic()
    reader, writer = await connect(port, source)
    writer.write(request_head(body) + body)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if ": " in line)
    if status == 200:
        await reader.readexactly(8)  # the first bytes of its chunked audio
    elapsed = time.monotonic() - started
    writer.close()
    return status, elapsed, headers


def test_connections_whose_headers_trickle_in_are_closed_within_the_read_timeout(fair):
    _, gateway, _ = fair

    async def run() -> tuple[list[bool], int]:
        connections = [await connect(gateway.config.port) for _ in range(50)]
        for reader, writer in connections:
            writer.write(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
        trickle = asyncio.create_task(_trickle([writer for _, writer in connections]))
        closed = await asyncio.gather(*(is_closed_within(reader, READ_TIMEOUT_S + 3.0) for reader, _ in connections))
        trickle.cancel()
        status, _, _ = await first_audio_s(gateway.config.port, "127.0.0.1")
        return closed, status

    closed, status = asyncio.run(run())
    assert all(closed), f"{closed.count(False)} of 50 still open"
    assert status == 200


async def _trickle(writers) -> None:
    while True:
        for writer in writers:
            if not writer.is_closing():
                writer.write(b"X")
        await asyncio.sleep(0.5)


def test_half_sent_bodies_are_answered_at_once_or_within_the_read_timeout_and_closed(fair):
    """100 requests that send 10 of their 100,000 bytes: those within the address's cap get 408 once the read
    timeout passes, the rest 429 at once; none is held open past it."""
    _, gateway, _ = fair

    async def run() -> list[int]:
        connections = [await connect(gateway.config.port) for _ in range(100)]
        for _, writer in connections:
            writer.write(request_head(b"", 100_000) + b'{"model": ')
        async with asyncio.timeout(READ_TIMEOUT_S + 5.0):
            return await asyncio.gather(*(status_of(reader) for reader, _ in connections))

    statuses = asyncio.run(run())
    assert sorted(set(statuses)) == [408, 429] and statuses.count(408) == CAPS.max_streams_per_address, statuses


def test_a_client_past_its_byte_cap_is_refused_before_its_body_is_read(fair):
    _, _, small = fair  # 4 MiB a client

    async def run() -> list[int]:
        connections = [await connect(small.config.port) for _ in range(5)]
        for _, writer in connections:
            writer.write(request_head(b"", 1_000_000) + b"{")  # a body of 1 MB, announced, not yet sent
        async with asyncio.timeout(READ_TIMEOUT_S + 5.0):
            return await asyncio.gather(*(status_of(reader) for reader, _ in connections))

    assert sorted(asyncio.run(run())) == [408, 408, 408, 408, 429]


def test_beside_200_clients_that_read_nothing_another_gets_its_audio_soon_and_they_are_dropped(fair):
    """The 200 come from one address: its cap admits 16, the rest get 429 with Retry-After at once. The 16 take
    nothing (a tiny receive buffer, a few bytes a second): the gateway's small send buffer stops their audio, the
    server pauses them, and the write timeout drops them. Meanwhile a request from another address gets its first
    audio within seconds (beside 200 such readers it once took 15-28 s, with no 503 to anyone)."""
    srv, gateway, _ = fair
    port = gateway.config.port

    async def run():
        idle = [(await first_audio_s(port, OTHER_ADDRESS))[1] for _ in range(3)]
        body = json.dumps({**SPEECH, "max_audio_seconds": 60.0}).encode()
        slow = [await connect(port, receive_buffer=2048) for _ in range(200)]
        for _, writer in slow:
            writer.write(request_head(body) + body)
        statuses = await asyncio.gather(*(_status_and_retry(reader) for reader, _ in slow))
        admitted = [(reader, writer) for (reader, writer), (status, _) in zip(slow, statuses) if status == 200]
        fast = asyncio.Event()
        readers = [asyncio.create_task(_read_slowly(reader, fast)) for reader, _ in admitted]
        await asyncio.sleep(4.0)  # their audio fills the buffers; the server pauses them
        beside = [await first_audio_s(port, OTHER_ADDRESS) for _ in range(3)]
        # They read slowly until the server holds none of them (each dropped), or a minute: a stream that waited for
        # an LM slot stalls its write only once it starts, so a fixed slow spell ended before its write timeout.
        # Past the minute they read on at once: a stream never dropped then gets its whole audio, and fails below
        await asyncio.to_thread(wait_for, lambda: scrape(srv)["voxlane_live_requests"] == 0, WRITE_TIMEOUT_S + 60.0)
        fast.set()
        received = await asyncio.gather(*(asyncio.wait_for(task, 60.0) for task in readers))
        return idle, statuses, beside, received

    idle, statuses, beside, received = asyncio.run(run())
    print(f"first audio alone {[round(s, 3) for s in idle]} s, beside 200 slow readers "
          f"{[(status, round(s, 3)) for status, s, _ in beside]} s")  # shown with -s
    assert [s for s, _ in statuses].count(200) == CAPS.max_streams_per_address
    assert all(retry == "1" for status, retry in statuses if status == 429)
    assert {status for status, _ in statuses} == {200, 429}
    for status, seconds, headers in beside:
        assert (status == 200 and seconds <= FIRST_AUDIO_S) or (status == 503 and "Retry-After" in headers), \
            (status, seconds, idle)
    whole = 60 * 24_000 * 2  # a stream's 16-bit PCM, had it been served to the end
    assert all(got < whole / 2 for got in received), received  # each dropped long before its end
    assert wait_for(lambda: scrape(srv)["voxlane_live_requests"] == 0, timeout_s=15)


async def _status_and_retry(reader) -> tuple[int, str | None]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
    return int(head.split(" ", 2)[1]), headers.get("Retry-After")


async def _read_slowly(reader, fast: asyncio.Event) -> int:
    """A few bytes a second until `fast` is set, then all the rest at once: the bytes this client got before its
    stream ended (fewer than its whole audio where the gateway dropped it)."""
    got = 0
    try:
        while not fast.is_set() and (data := await reader.read(16)):
            got += len(data)
            await asyncio.sleep(1.0)
        while data := await reader.read(1 << 16):
            got += len(data)
    except ConnectionError:
        pass
    return got
