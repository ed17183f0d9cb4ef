"""VoxLane's Prometheus metrics, served on Triton's metrics port (`/metrics`).

| metric | kind | labels | meaning |
| --- | --- | --- | --- |
| `voxlane_chunks_total` | counter | `lane` | audio chunks sent, by the lane that decoded them |
| `voxlane_ttfa_ms` | histogram | | server-side time from request arrival to its first chunk sent |
| `voxlane_first_audio_phase_ms` | histogram | `phase` | the server-side TTFA cut into consecutive phases (`to_lm`, `queue`, `prefill`, `frames`, `channel`, `codec`, `send`; `lm` for the first five where the LM sent no stamps: scheduler/first_audio.py); a request's phases add up to its `voxlane_ttfa_ms` |
| `voxlane_stalls_total` | counter | | chunks sent after their playback deadline |
| `voxlane_live_requests` | gauge | | streams in flight in the router |
| `voxlane_lane_up` | gauge | `lane` | 1 while the lane model (`speechlm_lm`, `codec`, `codec_urgent`) serves, 0 while it is down |
| `voxlane_lane_restarts_total` | counter | `lane` | times the router reloaded the lane after its process died |
| `voxlane_codec_ms` | histogram | `lane` | a chunk's codec call as the router sees it (queueing + batch decode) |
| `voxlane_codec_run_ms` | histogram | `lane` | the lane's own run time of the batch decode that held the chunk |
| `voxlane_codec_queue_ms` | histogram | `lane` | the rest of the call: `voxlane_codec_ms` minus the run time (queueing, transfer) |
| `voxlane_refiner_ms` | histogram | `lane` | a cascade's refinement call as the router sees it (queueing + batch refinement; cascades only) |
| `voxlane_refiner_run_ms` | histogram | `lane` | the refinement lane's own run time of the batch that held the chunk |
| `voxlane_refiner_queue_ms` | histogram | `lane` | the rest of the call: `voxlane_refiner_ms` minus the run time |
| `voxlane_chunks_routed_total` | counter | `lane`, `reason` | chunks sent, by routed lane and the reason the rule gave (`first_chunk`, `low_slack`, `slack_ok`, `urgent_full`, `mode`) |
| `voxlane_chunk_slack_ms` | histogram | | a chunk's playback deadline minus its send time (chunk 0 has none; below 0 is a stall) |
| `voxlane_lm_batch_size` | gauge | | streams holding an LM slot after its last step (`voxlane_lm_live_streams`) |
| `voxlane_admission_limit` | gauge | | streams the server admits at once: the LM lane's slots (`--max-slots`); with `voxlane_live_requests`, a server's room (the chart's autoscaler divides them) |
| `voxlane_lm_prefill_seconds_total` | counter | | the LM thread's time prefilling admitted requests |
| `voxlane_lm_decode_seconds_total` | counter | | its time launching decode steps and waiting for their codes |
| `voxlane_lm_host_seconds_total` | counter | | its other work: admission, cutting and sending chunks |
| `voxlane_lm_idle_seconds_total` | counter | | its time blocked with no request |
| `voxlane_lm_step_batch` | histogram | | the batch size of each decode step: its running rows |
| `voxlane_lm_live_streams` | gauge | | streams holding an LM slot (playing or paused on their listener) |
| `voxlane_lm_waiting_requests` | gauge | | requests waiting for a slot or KV memory |
| `voxlane_lm_kv_blocks_used` | gauge | | KV pool blocks the live streams own (pooled layout) |
| `voxlane_lm_kv_blocks_free` | gauge | | KV pool blocks free |
| `voxlane_lm_live_stream_seconds_total` | counter | | live streams integrated over time (its rate: the mean live streams) |
| `voxlane_lm_waiting_seconds_total` | counter | | time some request waited for a slot or KV memory |
| `voxlane_lm_idle_waiting_seconds_total` | counter | | the LM thread's idle time while some request waited |
| `voxlane_prompt_cache_hits_total` | counter | | prefills whose voice prompt prefix was cached (its KV copied, not computed) |
| `voxlane_prompt_cache_misses_total` | counter | | prefills that computed their prefix (and cached it) |
| `voxlane_prompt_cache_bytes` | gauge | | bytes of KV the cached prefixes hold (at most `--prompt-cache-mib`) |

The four `voxlane_lm_*_seconds_total` counters together cover the LM thread's wall time.
"""
from __future__ import annotations

import threading

import triton_python_backend_utils as pb_utils

from backend_python.stub_common.periodic import Periodic

from protocol.metrics import ADMISSION_LIMIT_METRIC
from protocol.models import LANE_MODELS
from scheduler import FIRST_AUDIO_PHASES, ROUTES, Lane, RouteReason
from scheduler.first_audio import LM_PHASE as FIRST_AUDIO_LM_PHASE

STEP_BATCH_BUCKETS = [1.0, 2.0, 4.0, 8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0]
PHASE_FLUSH_PERIOD_S = 1.0
TTFA_BUCKETS_MS = [10.0, 25.0, 50.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0, 2000.0, 5000.0]
CODEC_BUCKETS_MS = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
PHASE_BUCKETS_MS = [0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0]
SLACK_BUCKETS_MS = [-500.0, -200.0, -100.0, -50.0, 0.0, 50.0, 100.0, 200.0, 300.0, 500.0, 1000.0, 2000.0, 5000.0]


class _CallMetrics:
    """One kind of lane call's histograms per routed lane: `voxlane_{kind}_ms` (the call as the router sees it),
    `voxlane_{kind}_run_ms` (the lane's own run time of the batch that held the chunk) and `voxlane_{kind}_queue_ms`
    (the rest: queueing, transfers). Not locked: RouterMetrics' lock holds."""

    def __init__(self, kind: str, what: str, batch_work: str) -> None:
        call = pb_utils.MetricFamily(f"voxlane_{kind}_ms", f"{what} call latency per chunk as the router sees it",
                                     pb_utils.MetricFamily.HISTOGRAM)
        run = pb_utils.MetricFamily(f"voxlane_{kind}_run_ms",
                                    f"The {kind} lane's run time of the {batch_work} per chunk",
                                    pb_utils.MetricFamily.HISTOGRAM)
        queue = pb_utils.MetricFamily(f"voxlane_{kind}_queue_ms",
                                      f"{what} call time per chunk less the lane's run time",
                                      pb_utils.MetricFamily.HISTOGRAM)
        self.families = (call, run, queue)  # a family must outlive its metrics
        self._metrics = {lane: tuple(family.Metric(labels={"lane": lane.value}, buckets=CODEC_BUCKETS_MS)
                                     for family in self.families) for lane in (Lane.URGENT, Lane.BACKGROUND)}

    def observe(self, lane: Lane, seconds: float, run_s: float) -> None:
        """One call: its time as the router saw it and the lane's own run time within it."""
        call, run, queue = self._metrics[lane]
        call.observe(seconds * 1e3)
        run.observe(run_s * 1e3)
        queue.observe(max(0.0, seconds - run_s) * 1e3)


class RouterMetrics:
    """Thread-safe: every update holds one lock. Concurrent metric calls from several
    threads crashed the stub (they share its message queue to the server)."""

    def __init__(self, lanes: tuple[str, ...] = LANE_MODELS, refines: bool = False) -> None:
        """`lanes`: the lane models this server runs (a cascade's refinement lanes only where it serves one);
        `refines`: it serves a cascade, whose refinement calls are timed too."""
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
        up = pb_utils.MetricFamily("voxlane_lane_up", "1 while the lane model serves, 0 while it is down",
                                   pb_utils.MetricFamily.GAUGE)
        restarts = pb_utils.MetricFamily("voxlane_lane_restarts_total",
                                         "Times the router reloaded the lane after its process died",
                                         pb_utils.MetricFamily.COUNTER)
        routed = pb_utils.MetricFamily("voxlane_chunks_routed_total", "Chunks sent, by routed lane and routing reason",
                                       pb_utils.MetricFamily.COUNTER)
        slack = pb_utils.MetricFamily("voxlane_chunk_slack_ms", "A chunk's playback deadline minus its send time",
                                      pb_utils.MetricFamily.HISTOGRAM)
        phase = pb_utils.MetricFamily("voxlane_first_audio_phase_ms",
                                      "The server-side TTFA cut into consecutive phases (they add up to it)",
                                      pb_utils.MetricFamily.HISTOGRAM)
        self._codec = _CallMetrics("codec", "Codec", "batch decode")
        self._refiner = _CallMetrics("refiner", "Refinement", "batch refinement") if refines else None
        self._families = (chunks, ttfa, phase, stalls, live, up, restarts, routed, slack, *self._codec.families,
                          *(self._refiner.families if refines else ()))  # a family must outlive its metrics
        self._lane_up = {model: up.Metric(labels={"lane": model}) for model in lanes}
        self._lane_restarts = {model: restarts.Metric(labels={"lane": model}) for model in lanes}
        for gauge in self._lane_up.values():
            gauge.set(1)
        self._routed = {(lane, reason): routed.Metric(labels={"lane": lane.value, "reason": reason.value})
                        for lane, reason in ROUTES}
        self._slack = slack.Metric(labels={}, buckets=SLACK_BUCKETS_MS)
        self._chunks = {lane: chunks.Metric(labels={"lane": lane.value}) for lane in Lane}
        self._ttfa = ttfa.Metric(labels={}, buckets=TTFA_BUCKETS_MS)
        self._phases = {name: phase.Metric(labels={"phase": name}, buckets=PHASE_BUCKETS_MS)
                        for name in (*FIRST_AUDIO_PHASES, FIRST_AUDIO_LM_PHASE)}
        self._stalls = stalls.Metric(labels={})
        self._live = live.Metric(labels={})

    def on_chunk(self, lane: Lane, reason: RouteReason | None, slack_s: float | None) -> None:
        """A chunk sent: its routed lane, the rule's reason, and its deadline minus now (None for chunk 0,
        whose deadline is its own send); a negative slack is a stall."""
        with self._lock:
            self._chunks[lane].increment(1)
            if (routed := self._routed.get((lane, reason))) is not None:
                routed.increment(1)
            if slack_s is not None:
                self._slack.observe(slack_s * 1e3)
                if slack_s < 0:
                    self._stalls.increment(1)

    def on_codec_call(self, lane: Lane, seconds: float, run_s: float) -> None:
        """One codec call: its time as the router saw it and the lane's own run time within it."""
        with self._lock:
            self._codec.observe(lane, seconds, run_s)

    def on_refiner_call(self, lane: Lane, seconds: float, run_s: float) -> None:
        """One refinement call of a cascade: its time as the router saw it and the lane's own run time within it."""
        with self._lock:
            self._refiner.observe(lane, seconds, run_s)

    def on_first_chunk(self, ttfa_s: float, phases: dict[str, float] | None = None) -> None:
        """A stream's first chunk sent: its server-side TTFA and, where known, its phases (seconds by name)."""
        with self._lock:
            self._ttfa.observe(ttfa_s * 1e3)
            for name, seconds in (phases or {}).items():
                self._phases[name].observe(seconds * 1e3)

    def add_live(self, delta: int) -> None:
        with self._lock:
            self._num_live += delta
            self._live.set(self._num_live)

    def on_lane_change(self, model: str, is_up: bool, is_restart: bool) -> None:
        """A lane went down or came back (LaneHealth's on_change: once per change, off the hot path)."""
        with self._lock:
            self._lane_up[model].set(1 if is_up else 0)
            if is_restart:
                self._lane_restarts[model].increment(1)


class LMMetrics:
    """Called by the engine thread only. The gauge is set when it changes, not every step: each
    set is a round trip to tritonserver, and a stub killed inside one crashed the whole server
    (`boost::interprocess::lock_exception`), so a steady batch sends nothing."""

    def __init__(self, admission_limit: int) -> None:
        """`admission_limit`: the streams the LM lane holds at once (`EngineConfig.max_slots`), set once."""
        family = pb_utils.MetricFamily("voxlane_lm_batch_size", "Requests in the LM lane's last decode step",
                                       pb_utils.MetricFamily.GAUGE)
        limit = pb_utils.MetricFamily(ADMISSION_LIMIT_METRIC, "Streams the server admits at once (the LM's slots)",
                                      pb_utils.MetricFamily.GAUGE)
        self._families = (family, limit)  # a family must outlive its metrics
        self._batch_size = family.Metric(labels={})
        self._admission_limit = limit.Metric(labels={})  # a metric lives while referenced: set once, kept
        self._admission_limit.set(admission_limit)
        self._last: int | None = None

    def on_step(self, batch_size: int) -> None:
        if batch_size != self._last:
            self._batch_size.set(batch_size)
            self._last = batch_size


class _ExportedFromThread:
    """Metric families flushed from a thread of their own, once every `period_s`: each metric call is a round trip
    to tritonserver, too slow and too risky for the engine's thread, and one per step would cost the loop time."""

    def __init__(self, thread_name: str, period_s: float) -> None:
        self._families = []
        self._thread = Periodic(thread_name, period_s, self.flush)

    def _metric(self, name: str, help_text: str, kind):
        family = pb_utils.MetricFamily(name, help_text, kind)
        self._families.append(family)  # a family must outlive its metrics
        return family.Metric(labels={})

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def flush(self) -> None:
        raise NotImplementedError


class LMPhaseMetrics(_ExportedFromThread):
    """Exports the LM engine's phase account (`engine.timing.PhaseClock`) from a thread of its own."""

    def __init__(self, drain, period_s: float = PHASE_FLUSH_PERIOD_S) -> None:
        """`drain()` -> `PhaseTotals` since its last call."""
        from backend_python.engine.timing import LoopPhase

        super().__init__("voxlane-lm-metrics", period_s)
        self._drain = drain
        self._seconds = {phase: self._metric(f"voxlane_lm_{phase.value}_seconds_total",
                                             f"Seconds the LM lane's thread spent in {phase.value}",
                                             pb_utils.MetricFamily.COUNTER) for phase in LoopPhase}
        batch = pb_utils.MetricFamily("voxlane_lm_step_batch", "Batch size of each LM decode step",
                                      pb_utils.MetricFamily.HISTOGRAM)
        self._families.append(batch)
        self._batch = batch.Metric(labels={}, buckets=STEP_BATCH_BUCKETS)
        self._integrals = {name: self._metric(f"voxlane_lm_{name}_total", help_text, pb_utils.MetricFamily.COUNTER)
                           for name, help_text in _INTEGRALS.items()}
        self._gauges = {name: self._metric(f"voxlane_lm_{metric}", help_text, pb_utils.MetricFamily.GAUGE)
                        for name, (metric, help_text) in _OCCUPANCY.items()}

    def flush(self) -> None:
        totals = self._drain()
        for phase, seconds in totals.seconds.items():
            if seconds > 0:
                self._seconds[phase].increment(seconds)
        for batch_size, count in totals.step_batch_sizes.items():
            for _ in range(count):
                self._batch.observe(float(batch_size))
        for name, counter in self._integrals.items():
            if (seconds := getattr(totals, name.replace("_seconds", "_s"))) > 0:
                counter.increment(seconds)
        for name, gauge in self._gauges.items():
            gauge.set(getattr(totals.occupancy, name))


# the occupancy integrals (PhaseTotals fields, seconds) and gauges (Occupancy fields) the LM lane exports
_INTEGRALS = {"live_stream_seconds": "Live streams in the LM lane integrated over time",
              "waiting_seconds": "Time some request waited for an LM slot or KV memory",
              "idle_waiting_seconds": "The LM thread's idle time while some request waited"}
_OCCUPANCY = {"num_live": ("live_streams", "Streams holding an LM slot, playing or paused"),
              "num_waiting": ("waiting_requests", "Requests waiting for an LM slot or KV memory"),
              "kv_blocks_used": ("kv_blocks_used", "KV pool blocks the live streams own"),
              "kv_blocks_free": ("kv_blocks_free", "KV pool blocks free")}


class PromptCacheMetrics(_ExportedFromThread):
    """Exports the LM's prompt cache counts (`models/prompt_cache.py` PromptCacheStats) from a thread of its own."""

    def __init__(self, stats, period_s: float = PHASE_FLUSH_PERIOD_S) -> None:
        """`stats()` -> the cache's PromptCacheStats (counts since it was made)."""
        super().__init__("voxlane-prompt-cache-metrics", period_s)
        self._stats = stats
        self._hits = self._metric("voxlane_prompt_cache_hits_total", "Prefills whose voice prompt prefix was cached",
                                  pb_utils.MetricFamily.COUNTER)
        self._misses = self._metric("voxlane_prompt_cache_misses_total", "Prefills that computed their prompt prefix",
                                    pb_utils.MetricFamily.COUNTER)
        self._bytes = self._metric("voxlane_prompt_cache_bytes", "Bytes of KV the cached prompt prefixes hold",
                                   pb_utils.MetricFamily.GAUGE)
        self._exported = (0, 0)  # hits and misses sent so far

    def flush(self) -> None:
        stats = self._stats()
        hits, misses = self._exported
        if stats.hits > hits:
            self._hits.increment(stats.hits - hits)
        if stats.misses > misses:
            self._misses.increment(stats.misses - misses)
        self._bytes.set(stats.num_bytes)
        self._exported = (stats.hits, stats.misses)
