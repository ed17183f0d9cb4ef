"""The LM's chunks reach the router over a Unix socket of their own, not a decoupled BLS stream.

Why: Triton 2.51's Python-backend stub can deadlock a whole process when a decoupled BLS response
iterator receives responses back to back while another thread of the same stub starts a new
decoupled BLS request. `ResponseIterator.__next__` takes the GIL back while it still holds the
iterator's mutex; `exec(decoupled=True)` holds the GIL while it waits for the stub's iterator-map
mutex; and the stub's receiving thread holds that map mutex while it waits for the iterator's
mutex. The soak test met it as a whole-server stall: every stream frozen, the LM's engine blocked
in `send`, the router's threads waiting for the GIL. Through this channel every BLS request the
router makes gets exactly one response (the LM's final: accepted, or refused with `error`), and
with one response per iterator that cycle cannot close.

The router listens (one `ChunkChannel` per router process: an abstract Unix socket and a random
key, both passed to the LM as request parameters); the LM connects on the first request naming the
channel and sends `(stream_id, kind, payload)` messages (`protocol.channel.ChannelKind`: CHUNK with
a dict of arrays, END with the stream's `protocol.Ended`). A reader thread per connection puts
each message on its stream's queue; messages of streams nobody waits for are dropped.
"""
from __future__ import annotations

import logging
import os
import queue
import secrets
import socket
import threading
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener

from protocol.channel import ChannelKind
from protocol.reasons import Ended

log = logging.getLogger("voxlane.channel")
CHANNEL_PARAMETER = "voxlane_channel"  # BLS request parameters the router sets on its LM requests
KEY_PARAMETER = "voxlane_channel_key"


def _address(name: str) -> str:
    return "\0" + name  # Linux's abstract namespace: no file to clean up, gone with the process


class ChunkChannel:
    """The router's end: per-stream queues fed by the LM's connections."""

    def __init__(self) -> None:
        self.name = f"voxlane-{os.getpid()}-{secrets.token_hex(8)}"
        self._key = secrets.token_hex(16)
        self._listener = Listener(_address(self.name), family="AF_UNIX", authkey=self._key.encode())
        self._lock = threading.Lock()
        self._queues: dict[str, queue.SimpleQueue] = {}
        self._connections: list[Connection] = []
        self._is_closed = False
        threading.Thread(target=self._accept, name="voxlane-channel-accept", daemon=True).start()

    @property
    def parameters(self) -> dict[str, str]:
        """What an LM request carries so that the LM sends its chunks here."""
        return {CHANNEL_PARAMETER: self.name, KEY_PARAMETER: self._key}

    def subscribe(self, stream_id: str) -> queue.SimpleQueue:
        """The queue of `stream_id`'s messages; subscribe before the LM can send any."""
        with self._lock:
            return self._queues.setdefault(stream_id, queue.SimpleQueue())

    def unsubscribe(self, stream_id: str) -> None:
        with self._lock:
            self._queues.pop(stream_id, None)

    def post(self, stream_id: str, kind: object, payload: object) -> bool:
        """Put a message of the router's own (an ack) on a subscribed stream's queue; False when none."""
        with self._lock:
            q = self._queues.get(stream_id)
        if q is not None:
            q.put((kind, payload))
        return q is not None

    def end_all(self, ended: Ended) -> None:
        """Wake every subscribed stream with an END message (the LM died: nothing more will come)."""
        with self._lock:
            queues = list(self._queues.values())
        for q in queues:
            q.put((ChannelKind.END, ended))

    def close(self) -> None:
        """Each connection is shut down, which ends its reader's `recv`; the reader closes it. Closed here, its fd
        could be reused by a new socket (a new router's channel in the same process) while the reader still sat
        in `recv` on the number, and that reader then took the new socket's messages."""
        self._is_closed = True
        with self._lock:  # a reader closes its connection under the lock: none here is closed yet
            for conn in self._connections:
                _shut_down(conn)
        try:  # wakes the accept thread; closing alone does not interrupt a blocked accept
            with socket.socket(socket.AF_UNIX) as wake:
                wake.connect(_address(self.name))
        except OSError:
            pass
        self._listener.close()

    def _accept(self) -> None:
        while not self._is_closed:
            try:
                conn = self._listener.accept()
            except (AuthenticationError, EOFError, OSError) as exc:
                if not self._is_closed:
                    log.warning("refused a channel connection: %s", exc)
                continue
            if self._is_closed:
                conn.close()
                return
            with self._lock:
                self._connections.append(conn)
                if self._is_closed:  # close() ran meanwhile and did not see it
                    _shut_down(conn)
            threading.Thread(target=self._read, args=(conn,), name="voxlane-channel-read", daemon=True).start()

    def _read(self, conn: Connection) -> None:
        while True:
            try:
                stream_id, kind, payload = conn.recv()
            except (EOFError, OSError):  # the LM closed it, or died: LaneWatch reports a dead LM
                break
            except Exception:  # closed under us by close(), or a malformed message
                if self._is_closed or conn.closed:
                    break
                log.exception("dropped a malformed message on the chunk channel")
                continue
            with self._lock:
                q = self._queues.get(stream_id)
            if q is not None:
                q.put((kind, payload))
        with self._lock:  # only here, and under the lock: close() never shuts down a closed (reusable) fd
            self._connections.remove(conn)
            conn.close()


def _shut_down(conn: Connection) -> None:
    """End both directions of `conn`'s socket, keeping its fd open (its reader closes it)."""
    try:
        sock = socket.socket(fileno=conn.fileno())
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.detach()  # the fd stays the connection's


class ChannelError(RuntimeError):
    """The router's channel cannot be reached (the router is gone, or the key is wrong)."""


class ChannelClients:
    """The LM's end: one connection per router channel, made on first use and remade after a break."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: dict[str, _Connection] = {}

    def connect(self, name: str, key: str) -> "_Connection":
        with self._lock:
            conn = self._connections.get(name)
            if conn is None or conn.is_broken:
                try:
                    conn = _Connection(Client(_address(name), family="AF_UNIX", authkey=key.encode()))
                except (AuthenticationError, OSError, EOFError) as exc:
                    raise ChannelError(f"cannot reach the router's chunk channel {name!r}: {exc}") from None
                self._connections[name] = conn
            return conn

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()


class _Connection:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self.is_broken = False

    def send(self, stream_id: str, kind: ChannelKind, payload) -> None:
        with self._lock:
            if self.is_broken:
                raise ChannelError("the router's chunk channel is closed")
            try:
                self._conn.send((stream_id, kind, payload))
            except (OSError, ValueError) as exc:
                self.is_broken = True
                raise ChannelError(f"the router's chunk channel broke: {exc}") from None

    def close(self) -> None:
        with self._lock:
            self.is_broken = True
            self._conn.close()
