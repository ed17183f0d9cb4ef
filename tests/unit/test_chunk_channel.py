"""The chunk channel between the LM and the router: per-stream delivery, in order, and its failures."""
from __future__ import annotations

import queue
import threading

import numpy as np
import pytest

from backend_python.stub_common.chunk_channel import (CHANNEL_PARAMETER, KEY_PARAMETER, ChannelClients,
                                                 ChannelError, ChunkChannel)
from protocol.channel import ChannelKind
from protocol.reasons import DONE, Ended, EndReason


@pytest.fixture
def channel():
    channel = ChunkChannel()
    yield channel
    channel.close()


def connect(channel: ChunkChannel, clients: ChannelClients | None = None):
    params = channel.parameters
    return (clients or ChannelClients()).connect(params[CHANNEL_PARAMETER], params[KEY_PARAMETER])


def test_each_stream_gets_its_own_messages_in_order(channel):
    a, b = channel.subscribe("a"), channel.subscribe("b")
    conn = connect(channel)
    for i in range(50):
        conn.send("a" if i % 2 else "b", ChannelKind.CHUNK, {"chunk_index": np.array([i], dtype=np.int32)})
    conn.send("a", ChannelKind.END, DONE)
    conn.send("b", ChannelKind.END, Ended(EndReason.INTERNAL, "decode failed: boom"))
    got_a = [a.get(timeout=5) for _ in range(26)]
    got_b = [b.get(timeout=5) for _ in range(26)]
    assert [int(p["chunk_index"][0]) for k, p in got_a[:-1]] == list(range(1, 50, 2))
    assert [int(p["chunk_index"][0]) for k, p in got_b[:-1]] == list(range(0, 50, 2))
    assert got_a[-1] == (ChannelKind.END, DONE) and got_b[-1] == (ChannelKind.END, Ended(EndReason.INTERNAL, "decode failed: boom"))


def test_messages_of_streams_nobody_waits_for_are_dropped(channel):
    kept = channel.subscribe("kept")
    conn = connect(channel)
    conn.send("gone", ChannelKind.CHUNK, {"x": 1})  # unsubscribed already, or never subscribed
    conn.send("kept", ChannelKind.END, DONE)
    assert kept.get(timeout=5) == (ChannelKind.END, DONE)
    channel.unsubscribe("kept")
    conn.send("kept", ChannelKind.CHUNK, {"x": 2})
    conn.send("sync", ChannelKind.END, DONE)
    with pytest.raises(queue.Empty):
        kept.get(timeout=0.3)


def test_arrays_arrive_as_sent(channel):
    q = channel.subscribe("s")
    tokens = np.arange(35 * 16, dtype=np.int32).reshape(35, 16)
    audio = np.linspace(-1, 1, 19200, dtype=np.float32)
    connect(channel).send("s", ChannelKind.CHUNK, {"tokens": tokens, "audio": audio})
    kind, payload = q.get(timeout=5)
    assert kind == ChannelKind.CHUNK
    np.testing.assert_array_equal(payload["tokens"], tokens)
    np.testing.assert_array_equal(payload["audio"], audio)
    assert payload["tokens"].dtype == np.int32 and payload["audio"].dtype == np.float32


def test_a_wrong_key_is_refused(channel):
    with pytest.raises(ChannelError, match="cannot reach the router's chunk channel"):
        ChannelClients().connect(channel.parameters[CHANNEL_PARAMETER], "0" * 32)
    q = channel.subscribe("s")  # and the channel still serves the right key
    connect(channel).send("s", ChannelKind.END, DONE)
    assert q.get(timeout=5) == (ChannelKind.END, DONE)


def test_an_unknown_channel_is_a_clear_error():
    with pytest.raises(ChannelError, match="voxlane-nobody"):
        ChannelClients().connect("voxlane-nobody", "0" * 32)


def test_end_all_wakes_every_waiting_stream(channel):
    queues = [channel.subscribe(f"s{i}") for i in range(3)]
    down = Ended(EndReason.LANE_DOWN, "the speechlm_lm lane is down")
    channel.end_all(down)
    assert [q.get(timeout=1) for q in queues] == [(ChannelKind.END, down)] * 3


def test_a_closed_router_breaks_the_connection_and_a_new_router_is_reached():
    clients = ChannelClients()
    first = ChunkChannel()
    q = first.subscribe("s")
    conn = connect(first, clients)
    conn.send("s", ChannelKind.CHUNK, {})
    assert q.get(timeout=5) == (ChannelKind.CHUNK, {})  # the router's side is reading
    first.close()
    with pytest.raises(ChannelError):
        for _ in range(100):  # the break shows on a send after the peer closed
            conn.send("s", ChannelKind.CHUNK, {"pad": np.zeros(4096, dtype=np.float32)})
    second = ChunkChannel()
    try:
        q = second.subscribe("t")
        connect(second, clients).send("t", ChannelKind.END, DONE)
        assert q.get(timeout=5) == (ChannelKind.END, DONE)
    finally:
        second.close()


def test_several_senders_share_one_connection(channel):
    queues = {f"s{i}": channel.subscribe(f"s{i}") for i in range(4)}
    clients = ChannelClients()

    def sender(stream_id: str) -> None:
        conn = connect(channel, clients)
        for i in range(100):
            conn.send(stream_id, ChannelKind.CHUNK, i)
        conn.send(stream_id, ChannelKind.END, DONE)

    threads = [threading.Thread(target=sender, args=(s,)) for s in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for q in queues.values():
        got = [q.get(timeout=5) for _ in range(101)]
        assert [p for _, p in got[:-1]] == list(range(100)) and got[-1] == (ChannelKind.END, DONE)


def test_closing_the_channel_closes_each_connection_once(monkeypatch):
    # a second close from the reader thread raced close() (EBADF), and could close a descriptor reused meanwhile;
    # now close() only shuts each connection down, and its reader closes it
    from multiprocessing.connection import Connection

    closes: list = []  # the objects, not their ids: an earlier test's connection closed now may have had this id
    close = Connection.close
    monkeypatch.setattr(Connection, "close", lambda conn: closes.append(conn) or close(conn))
    before = set(threading.enumerate())
    channel = ChunkChannel()
    q = channel.subscribe("s")
    conn = connect(channel)
    conn.send("s", ChannelKind.END, DONE)
    q.get(timeout=5)  # the channel holds the connection now, its reader waiting on it
    [server_side] = channel._connections
    readers = [t for t in set(threading.enumerate()) - before if t.name == "voxlane-channel-read"]
    assert len(readers) == 1
    channel.close()
    conn.close()  # the LM's end goes too: the reader wakes and ends
    for reader in readers:
        reader.join(timeout=5)
    assert not any(reader.is_alive() for reader in readers)
    assert sum(closed is server_side for closed in closes) == 1
