"""The LM lane's continuous-batching loop: schedule → run → output.

One thread owns the model. Each step the scheduler (step_scheduler.py) chooses whom to admit into free slots,
the runner (model_runner.py) prefills them, the scheduler chooses which running requests decode (one batched call
of at most `max_batch` rows, picked by scheduler/pacing.py), the runner launches their frame, and the output stage
(output_stage.py) turns the codes of a step into frames and chunks and hands them to each request's sink (in
`timeshare`, decoded to audio first). A slot is residency: a stream paused on its listener keeps its slot and KV
extent, never a row of a step; a request is admitted when a slot is free and its KV extent fits the pool. Requests
join and leave between steps; an error in one request's prefill ends only that request. A streaming-text request
joins once its prompt's text has arrived and skips the steps whose frame needs text that has not (text_pieces.py);
a family whose prompt needs the whole text speaks it segment by segment in the same slot (segments.py). A family
with a codebook delay pattern emits each frame's codebooks over several steps: its frames, chunks and limits count
complete frames only, and its end of speech runs on until the last codebook closes.

With `overlap_steps` (the default on CUDA) the host work of a step runs while the GPU computes the next one (the
runner reads a step's codes one step late). A request that ended at step t has one more, discarded, row in step
t+1. A step of fewer than `overlap_min_rows` rows is read at once (after the one in flight): at low load the GPU
then has no step queued when a new request comes, and its prefill starts a step sooner.

Other threads talk to the loop through its inbox (new requests, wake-ups) and the updates it applies between steps:
cancels, flow (frames taken), streamed text and input.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

import torch

from backend_python.engine import segments
from backend_python.engine.codec_runner import CodecRunner
from backend_python.engine.config import EngineConfig  # re-exported: the LM model imports it here
from backend_python.engine.input_pieces import InputPieces, input_idle_endings
from backend_python.engine.launched_step import LaunchedStep
from backend_python.engine.model_runner import ModelRunner, Prefilled
from backend_python.engine.output_stage import OutputStage
from backend_python.engine.sequence import Sequence, SeqStatus
from backend_python.engine.step_scheduler import Admission, StepScheduler
from backend_python.engine.text_pieces import TextPieces, idle_endings
from backend_python.engine.timing import LoopPhase, PhaseClock, StepTiming
from backend_python.models.base import Codec, SpeechLM
from protocol.reasons import SHUTTING_DOWN, Ended, EndReason

log = logging.getLogger("voxlane.engine")


class LMEngine:
    def __init__(self, model: SpeechLM, config: EngineConfig, codec: Codec | CodecRunner | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_step: Callable[[int], None] | None = None, refiner=None) -> None:
        """`codec` set (anything with `decode_windows`): the time-sharing baseline, chunks are decoded
        inline in this loop; a cascade's `refiner` (registry.load_refiner) then refines them first, inline too.

        `on_step(num_running)` is called after every step (metrics): the streams holding a slot."""
        self.model = model
        self.config = config
        self._clock = clock
        self._on_step = on_step
        self.phases = PhaseClock(clock)  # read by the lane's metrics
        timing = StepTiming()  # the runner measures, the scheduler admits by it
        self.runner = ModelRunner(model, config, self.phases, timing, clock)
        self.scheduler = StepScheduler(config, model, self.runner, timing, clock, self.runner.kv_positions)
        self.output = OutputStage(model, config, clock, codec, refiner)
        self._inbox: queue.Queue[Sequence | None] = queue.Queue()
        self._stopped = threading.Event()
        self._cancel_ids: set[str] = set()
        self._taken: dict[str, int] = {}  # flow updates not yet applied, by request id
        self._text = TextPieces()  # streaming-text pieces not yet applied
        self._input = InputPieces()  # an interleaved model's input pieces not yet applied
        self._cancel_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="voxlane-lm-engine", daemon=True)

    @property
    def codec(self) -> Codec | CodecRunner | None:
        """The inline codec (`timeshare`), or None."""
        return self.output.inline.codec

    @codec.setter
    def codec(self, codec: Codec | CodecRunner | None) -> None:
        self.output.inline.codec = codec

    @property
    def refiner(self):
        """A cascade's inline refiner (`timeshare`), or None."""
        return self.output.inline.refiner

    @refiner.setter
    def refiner(self, refiner) -> None:
        self.output.inline.refiner = refiner

    # ---- called from other threads -------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def add(self, seq: Sequence) -> None:
        seq.arrival_time = seq.text_at = self._clock()
        self._inbox.put(seq)

    def try_add(self, seq: Sequence) -> bool:
        """Queue `seq` unless `max_queued` requests already wait for a slot (then False, nothing queued)."""
        if self.num_queued >= self.config.max_queued:
            return False
        self.add(seq)
        return True

    @property
    def num_queued(self) -> int:
        """Requests not yet admitted (approximate when read from another thread)."""
        return self._inbox.qsize() + len(self.scheduler.waiting)

    def cancel_id(self, request_id: str) -> None:
        """Cancel the live request with this id (from any thread); unknown ids are ignored."""
        with self._cancel_lock:
            self._cancel_ids.add(request_id)  # read and cleared by the loop between steps
        self._inbox.put(None)  # wake the loop if it waits for work

    def set_taken(self, request_id: str, frames: int) -> None:
        """The client of acking request `request_id` has taken `frames` frames (from any thread)."""
        with self._cancel_lock:
            self._taken[request_id] = max(frames, self._taken.get(request_id, 0))
        self._inbox.put(None)  # wake the loop: the request may go on

    def add_text(self, request_id: str, text: str, is_final: bool) -> None:
        """More text for streaming-text request `request_id` (from any thread; unknown ids are ignored)."""
        self._text.add(request_id, text, is_final, self._clock())
        self._inbox.put(None)  # wake the loop: the request may go on

    def add_input(self, request_id: str, frames: torch.Tensor, is_final: bool) -> None:
        """More input frames ([N, K] codes) for interleaved request `request_id` (from any thread; unknown ids are
        ignored)."""
        self._input.add(request_id, frames, is_final, self._clock())
        self._inbox.put(None)  # wake the loop: the request may go on

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopped.set()
        self._inbox.put(None)
        self._thread.join(timeout_s)

    # ---- the loop ------------------------------------------------------------------
    def _loop(self) -> None:
        with torch.inference_mode():
            while not self._stopped.is_set():
                self._collect(self._wait_s())
                try:
                    self.step()
                except Exception as exc:  # a bug in a step ends the requests in it, never the loop
                    log.exception("engine step failed")
                    self._reset(f"internal error: {exc}")
        self._fail_all(SHUTTING_DOWN)  # LANE_DOWN: the request was fine, another server takes it

    def _wait_s(self) -> float | None:
        """How long the loop may sleep on its inbox: 0 while a step's codes are on their way, else as long as the
        scheduler has nothing to do (StepScheduler.wait_s)."""
        return 0.0 if self.runner.pending else self.scheduler.wait_s()

    def _collect(self, wait_s: float | None) -> None:
        """Move everything queued into `waiting`, waiting up to `wait_s` (None: until something comes)
        for the first item; None entries only wake the loop (cancel, flow update, stop).

        The whole inbox, past any None: a request left behind a wake-up would miss a cancel that
        `_drop_cancelled` reads (and clears) before the request reaches `waiting`."""
        items = []
        self.phases.charge(LoopPhase.HOST)
        try:
            items.append(self._inbox.get_nowait() if wait_s == 0 else self._inbox.get(timeout=wait_s))
            while True:
                items.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        self.phases.charge(LoopPhase.HOST if wait_s == 0 else LoopPhase.IDLE)
        self.scheduler.waiting.extend(item for item in items if item is not None)

    def step(self) -> None:
        """One step: apply what other threads sent, admit and prefill, decode a frame, emit what is ready."""
        self._apply_updates()
        self.scheduler.retire()
        self._prefill(self.scheduler.admit())
        self._prefill_segments(self.scheduler.segments_due())
        self._decode(self.scheduler.decode_rows())
        self.scheduler.retire()
        self.phases.charge(LoopPhase.HOST)
        self.phases.set_occupancy(self.scheduler.occupancy())
        if self._on_step is not None:
            self._on_step(len(self.scheduler.running))

    def _prefill(self, admission: Admission) -> None:
        """Prefill the admitted requests in one call; end those refused, and those whose own prefill failed."""
        for seq, error in admission.refused:
            self.output.finish(seq, error)
        if admission.ready:
            self._start(self.runner.prefill(admission.ready))

    def _start(self, prefilled: Prefilled) -> None:
        for seq, exc in prefilled.failed:
            log.warning("prefill of %s failed: %s", seq.request_id, exc)
            self.scheduler.free_slot(seq)
            self.output.finish(seq, str(exc))
        self.scheduler.start(prefilled.done)
        for seq in prefilled.done:
            self.output.start(seq)

    def _prefill_segments(self, due: list[Sequence]) -> None:
        """Prefill the next segment of each segmented request whose segment was spoken, into its own slot."""
        for seq in due:
            try:
                if not self.scheduler.fit_segment(seq):
                    continue  # the pool is full: the segment's prefill is tried again next step
                self.runner.prefill_segment(seq)
            except Exception as exc:  # a bad segment ends its request only
                log.warning("prefill of a text segment of %s failed: %s", seq.request_id, exc)
                self.output.finish(seq, str(exc))
                continue
            segments.start_segment(seq)
            self.output.start(seq)

    def _decode(self, rows: list[Sequence]) -> None:
        """Launch a frame for `rows`, then read and emit the steps whose codes are due (overlapped: the one
        before, whose host work hides behind this one; ModelRunner.in_flight)."""
        for done in self.runner.in_flight(self._launch(rows) if rows else None):
            self.output.emit(self.output.take(done, *self.runner.read(done)))

    def _launch(self, rows: list[Sequence]) -> LaunchedStep | None:
        try:
            return self.runner.launch(rows)
        except Exception as exc:  # a broken step ends the requests in it, not the loop
            log.exception("decode step failed")
            for seq in rows:
                self.output.finish(seq, f"decode failed: {exc}")
            return None

    # ---- updates from other threads, applied between steps --------------------------
    def _apply_updates(self) -> None:
        self._drop_cancelled()
        self._apply_taken()
        self._apply_text()

    def _apply_text(self) -> None:
        """Feed the text pieces that came; end the requests whose text was bad or stopped coming."""
        now, live = self._clock(), self.scheduler.live
        endings = self._text.apply(live) + self._input.apply(live)
        for seq, ended in endings + idle_endings(live, now) + input_idle_endings(live, now):
            self._end(seq, ended)
        blocked = [seq for seq in self.scheduler.running if seq.is_segmented and segments.is_blocked(seq)
                   and seq.status is not SeqStatus.FINISHED]
        self.output.emit([(seq, segments.settle(seq)) for seq in blocked])

    def _apply_taken(self) -> None:
        with self._cancel_lock:
            taken, self._taken = self._taken, {}
        if taken:
            for seq in self.scheduler.live:
                if seq.request_id in taken and seq.unread is not None:
                    seq.unread.on_taken(taken[seq.request_id])

    def _drop_cancelled(self) -> None:
        with self._cancel_lock:
            ids, self._cancel_ids = self._cancel_ids, set()
        if ids:
            for seq in self.scheduler.live:
                seq.is_cancelled = seq.is_cancelled or seq.request_id in ids
        for seq in [s for s in self.scheduler.live if s.is_cancelled]:
            self._end(seq, EndReason.CANCELLED)

    def _end(self, seq: Sequence, ended: str | EndReason | Ended | None) -> None:
        """End a live request between steps: a running one's slot is freed when it retires."""
        self.output.finish(seq, ended)
        self.scheduler.drop_waiting(seq)

    # ---- failures --------------------------------------------------------------------
    def _reset(self, reason: str) -> None:
        """End every live request with `reason` and free all slots."""
        self.runner.drop_pending()
        self._fail_all(reason)
        self.scheduler.reset()

    def _fail_all(self, reason: str | Ended) -> None:
        for seq in self.scheduler.live:
            self.output.finish(seq, reason)
