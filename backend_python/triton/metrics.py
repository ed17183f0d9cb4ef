"""VoxLane's Prometheus metrics, served on Triton's metrics port (`/metrics`).

| metric | kind | labels | meaning |
| --- | --- | --- | --- |
| `voxlane_chunks_total` | counter | `lane` | audio chunks sent, by the lane that decoded them |
| `voxlane_ttfa_ms` | histogram | | server-side time from request arrival to its first chunk sent |
| `voxlane_stalls_total` | counter | | chunks sent after their playback deadline |
| `voxlane_live_requests` | gauge | | streams in flight in the router |
| `voxlane_codec_ms` | histogram | `lane` | a chunk's codec call as the router sees it (queueing + batch decode) |
| `voxlane_lm_batch_size` | gauge | | requests in the LM lane's running batch after its last step |
"""
from __future__ import annotations

import threading

import triton_python_backend_utils as pb_utils

from scheduler import Lane

TTFA_BUCKETS_MS = [10.0, 25.0, 50.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0, 2000.0, 5000.0]
CODEC_BUCKETS_MS = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]


class RouterMetrics:
    """Thread-safe: every update holds one lock. Concurrent metric calls from several
    threads crashed the stub (they share its message queue to the server)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._num_live = 0
        chunks = pb_utils.MetricFamily("voxlane_chunks_total", "Audio chunks sent, by the lane that decoded them",
                                       pb_utils.MetricFamily.COUNTER)
        ttfa = pb_utils.MetricFamily("voxlane_ttfa_ms", "Server-side time from request arrival to first chunk sent",
                                     pb_utils.MetricFamily.HISTOGRAM)
        stalls = pb_utils.MetricFamily("voxlane_stalls_total", "Chunks sent after their playback deadline",
                                       pb_utils.MetricFamily.COUNTER)
        live = pb_utils.MetricFamily("voxlane_live_requests", "Streams in flight in the router",
                                     pb_utils.MetricFamily.GAUGE)
        codec = pb_utils.MetricFamily("voxlane_codec_ms", "Codec call latency per chunk as the router sees it",
                                      pb_utils.MetricFamily.HISTOGRAM)
        self._families = (chunks, ttfa, stalls, live, codec)  # a family must outlive its metrics
        self._codec = {lane: codec.Metric(labels={"lane": lane.value}, buckets=CODEC_BUCKETS_MS)
                       for lane in (Lane.URGENT, Lane.BACKGROUND)}
        self._chunks = {lane: chunks.Metric(labels={"lane": lane.value}) for lane in Lane}
        self._ttfa = ttfa.Metric(labels={}, buckets=TTFA_BUCKETS_MS)
        self._stalls = stalls.Metric(labels={})
        self._live = live.Metric(labels={})

    def on_chunk(self, lane: Lane, is_stall: bool) -> None:
        with self._lock:
            self._chunks[lane].increment(1)
            if is_stall:
                self._stalls.increment(1)

    def on_codec_call(self, lane: Lane, seconds: float) -> None:
        with self._lock:
            self._codec[lane].observe(seconds * 1e3)

    def on_first_chunk(self, ttfa_s: float) -> None:
        with self._lock:
            self._ttfa.observe(ttfa_s * 1e3)

    def add_live(self, delta: int) -> None:
        with self._lock:
            self._num_live += delta
            self._live.set(self._num_live)


class LMMetrics:
    """Called by the engine thread only. The gauge is set when it changes, not every step: each
    set is a round trip to tritonserver, and a stub killed inside one crashed the whole server
    (`boost::interprocess::lock_exception`), so a steady batch sends nothing."""

    def __init__(self) -> None:
        family = pb_utils.MetricFamily("voxlane_lm_batch_size", "Requests in the LM lane's last decode step",
                                       pb_utils.MetricFamily.GAUGE)
        self._family = family
        self._batch_size = family.Metric(labels={})
        self._last: int | None = None

    def on_step(self, batch_size: int) -> None:
        if batch_size != self._last:
            self._batch_size.set(batch_size)
            self._last = batch_size
