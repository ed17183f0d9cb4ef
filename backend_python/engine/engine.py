"""The LM lane's continuous-batching loop.

One thread owns the model. Each step: admit waiting requests into free slots
(prefill), launch one decode frame for the running requests that need one (one
batched call of at most `max_batch` rows, picked by scheduler/pacing.py), then cut
finished chunks and hand them to each request's sink. A slot is residency: a
stream paused on its listener keeps its slot and KV extent, never a row of a step;
a request is admitted when a slot is free and its KV extent fits the pool. Requests join and
leave between steps; an error in one request's prefill ends only that request.
A streaming-text request joins once its prompt's text has arrived and skips the
steps whose frame needs text that has not (text_pieces.py); a family whose prompt
needs the whole text speaks it segment by segment in the same slot (segments.py). A family with a codebook
delay pattern emits each frame's codebooks over several steps: a stream's rows go through its FrameAssembler
(models/delay_pattern.py), so its frames, chunks and limits count complete frames only, and its end of speech
runs on until the last codebook closes.

With `overlap_steps` (the default on CUDA) the host work of a step runs while the
GPU computes the next one: step t+1 is launched before step t's codes are read
(its inputs do not depend on them: the sampled codes feed the next frame on the
device), and t's copy to the host overlaps t+1. A request that ended at step t
has one more, discarded, row in step t+1.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

import torch

from backend_python.engine.codec_runner import CodecRunner
from backend_python.engine.config import EngineConfig  # re-exported: the LM model imports it here
from protocol.reasons import SHUTTING_DOWN, Ended, EndReason
from backend_python.engine import segments
from backend_python.engine.launched_step import LaunchedStep
from backend_python.engine.model_runner import ModelRunner
from backend_python.engine.output_stage import OutputStage
from backend_python.engine.sequence import Sequence, SeqStatus
from backend_python.engine.input_pieces import InputPieces, input_idle_endings
from backend_python.engine.text_pieces import TextPieces, idle_endings
from backend_python.engine.timing import LoopPhase, Occupancy, PhaseClock, StepTiming
from backend_python.models.base import Codec, SpeechLM
from scheduler import (AdmissionState, KVBlocks, PacedStream, StreamStatus, WaitingRequest, make_admission_policy,
                       pick_rows)

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
        self._admission = make_admission_policy(config.scheduler)
        self._timing = StepTiming()  # the runner measures, admission reads
        self.phases = PhaseClock(clock)  # read by the lane's metrics
        self.runner = ModelRunner(model, config, self.phases, self._timing, clock)  # prefill, decode, slot memory
        self._inbox: queue.Queue[Sequence | None] = queue.Queue()
        self._waiting: list[Sequence] = []
        self._running: list[Sequence] = []
        self._free_slots = list(range(config.max_slots))
        self._stopped = threading.Event()
        self._cancel_ids: set[str] = set()
        self._taken: dict[str, int] = {}  # flow updates not yet applied, by request id
        self._text = TextPieces()  # streaming-text pieces not yet applied
        self._input = InputPieces()  # an interleaved model's input pieces not yet applied
        self._cancel_lock = threading.Lock()
        self.output = OutputStage(model, config, clock, codec, refiner)  # chunks, words, sinks, inline codec
        positions = self.runner.kv_positions  # None: static rows, a slot is all a stream needs
        self._kv = None if positions is None else KVBlocks(positions, config.kv_block_size)
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
        return self._inbox.qsize() + len(self._waiting)

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
        """How long the loop may sleep on its inbox: 0 with work to do, None (until woken) with none,
        else until the first playback-paced request may go on (every running request is paused)."""
        if self.runner.pending or self._can_admit():
            return 0.0
        if any(seq.segment.is_over and seq.prompt is not None for seq in self._running):
            return 0.0  # a segment's prompt to prefill
        now = self._clock()
        if any(self._can_decode(seq, now) for seq in self._running):
            return 0.0
        wakes = [t for seq in self._running if (t := seq.resumes_at()) is not None]
        wakes += [t for seq in self._running + self._waiting if (t := seq.text_deadline()) is not None]
        return max(0.0, min(wakes) - now) if wakes else None

    def _can_admit(self) -> bool:
        """A slot is free and the first request with its prompt fits the KV pool (admission is FIFO)."""
        first = next((seq for seq in self._waiting if seq.prompt is not None), None)
        if not self._free_slots or first is None:
            return False
        try:
            return self._kv is None or self._kv.can_allocate(self._kv_need(first))
        except ValueError:
            return True  # too long: admission refuses it at once

    def _can_decode(self, seq: Sequence, now: float) -> bool:
        """Neither paused on its client nor waiting for its text."""
        return not seq.is_paused(now) and not self._needs_text(seq)

    def _needs_text(self, seq: Sequence) -> bool:
        if seq.is_segmented:
            return segments.is_blocked(seq)
        if seq.prompt is not None and seq.prompt.input is not None and seq.slot is not None:
            return self.model.is_waiting_for_input(seq.slot)
        return seq.is_text_open and self.model.is_waiting_for_text(seq.slot)

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
        self._waiting.extend(item for item in items if item is not None)

    def step(self) -> None:
        self._drop_cancelled()
        self._apply_taken()
        self._apply_text()
        self._retire()
        self._admit()
        self._prefill_segments()
        self._decode()
        self._retire()
        self.phases.charge(LoopPhase.HOST)
        self.phases.set_occupancy(self._occupancy())
        if self._on_step is not None:
            self._on_step(len(self._running))

    def _occupancy(self) -> Occupancy:
        kv = self._kv
        return Occupancy(len(self._running), len(self._waiting), kv.num_used_blocks if kv else 0,
                         kv.num_free_blocks if kv else 0)

    def _admit(self) -> None:
        """Prefill the waiting requests the admission policy lets in, in arrival order, in one call; the first
        whose KV extent does not fit the pool waits, and those behind it with it."""
        admitted = set(self._admission.admit(self._admission_state()))
        ready = []
        for seq in [s for s in self._waiting if s.request_id in admitted and s.prompt is not None]:
            try:
                need = self._kv_need(seq)
            except ValueError as exc:
                self._waiting.remove(seq)
                self.output.finish(seq, str(exc))
                continue
            if not self._take_slot(seq, need):
                break
            self._waiting.remove(seq)
            ready.append(seq)
        chunking = self.config.scheduler.chunking
        for beside, seq in enumerate(ready, start=len(self._running)):  # its chunk plan from the load
            plan = chunking.for_stream(beside, self._timing.step_s, 1.0 / self.model.frame_rate)
            seq.first_chunk_frames, seq.chunk_frames = plan.first_chunk_frames, plan.chunk_frames
        if ready:
            self._prefill(ready)

    def _take_slot(self, seq: Sequence, need: int) -> bool:
        """A slot and a KV extent of `need` positions for `seq`; False (nothing taken) when the pool is full."""
        if self._kv is not None:
            seq.kv_extent = self._kv.allocate(need)
            if seq.kv_extent is None:
                return False
        seq.slot = self._free_slots.pop()
        self._place(seq)
        return True

    def _place(self, seq: Sequence) -> None:
        if seq.kv_extent is not None:
            self.runner.place(seq)

    def _free_slot(self, seq: Sequence) -> None:
        """Give back `seq`'s slot and KV extent (the model forgets the slot; its next prefill overwrites it)."""
        self.runner.release(seq.slot)
        self._free_slots.append(seq.slot)
        if seq.kv_extent is not None and self._kv is not None:
            self._kv.free(seq.kv_extent)
        seq.kv_extent = None

    def _admission_state(self) -> AdmissionState:
        now = self._clock()
        # a stream waiting for its text stalls whatever admission does: it is not protected from prefills; nor is
        # one paused on its client, which holds the bound of audio it has not taken: a prefill cannot starve it
        # (its playback clock ran on while it waited, and read as a stall it held every new request back for
        # max_wait_s: 200 slow readers put 2 s and more on everyone's first audio)
        running = [StreamStatus(s.request_id, s.emitted_frames / self.model.frame_rate,
                                s.t_first_emitted) for s in self._running
                   if not self._needs_text(s) and not s.is_paused(now)]
        waiting = [WaitingRequest(s.request_id, s.arrival_time, self._timing.prefill_s(s.prompt.num_tokens))
                   for s in self._waiting if s.prompt is not None]
        return AdmissionState(now=now, num_free_slots=len(self._free_slots), step_time_s=self._timing.step_s,
                              running=running, waiting=waiting)

    def _prefill(self, seqs: list[Sequence]) -> None:
        """One batched prefill (the runner tries each request alone if it fails, so a bad one ends only itself)."""
        prefilled = self.runner.prefill(seqs)
        for seq, exc in prefilled.failed:
            log.warning("prefill of %s failed: %s", seq.request_id, exc)
            self._free_slot(seq)
            self.output.finish(seq, str(exc))
        for seq in prefilled.done:
            seq.status = SeqStatus.RUNNING
            self._running.append(seq)
            self.output.start(seq)

    def _kv_need(self, seq: Sequence) -> int:
        """The KV positions `seq`'s prompt and frames (its current segment's) write; ValueError past max_seq_len."""
        num_frames = segments.frames_needed(seq) if seq.is_segmented else seq.max_frames
        need = self.model.kv_positions_for(seq.prompt.num_tokens, num_frames)
        error = self.config.length_error(need, seq.prompt.num_tokens, num_frames,
                                         "its text segment" if seq.is_segmented else "request")
        if error is not None:
            raise ValueError(error)
        return need

    def _prefill_segments(self) -> None:
        """Prefill the next segment of each segmented request whose segment was spoken, into its own slot."""
        for seq in [s for s in self._running if s.segment.is_over and s.prompt is not None]:
            try:
                if not self._fit_segment(seq, self._kv_need(seq)):
                    continue  # the pool is full: the segment's prefill is tried again next step
                self.runner.prefill_segment(seq)
            except Exception as exc:  # a bad segment ends its request only
                log.warning("prefill of a text segment of %s failed: %s", seq.request_id, exc)
                self.output.finish(seq, str(exc))
                continue
            segments.start_segment(seq)
            self.output.start(seq)

    def _fit_segment(self, seq: Sequence, need: int) -> bool:
        """A segment starts its slot's keys anew: grow its KV extent to `need` if it must; False when the pool
        has no room now (it keeps an extent of its old size)."""
        old = seq.kv_extent
        if self._kv is None or old is None or old.num_positions >= need:
            return True
        self._kv.free(old)
        seq.kv_extent = self._kv.allocate(need)
        fits = seq.kv_extent is not None
        if not fits:
            seq.kv_extent = self._kv.allocate(old.num_positions)  # the run just freed is free: it fits
        self._place(seq)
        return fits

    def _decode(self) -> None:
        """Launch one frame for every running request not paused on its client, then read and emit the step
        whose codes are due (overlapped: the one before, whose host work hides behind this one)."""
        now = self._clock()
        rows = self._pace([seq for seq in self._running if self._can_decode(seq, now)], now)
        done = self.runner.in_flight(self._launch(rows) if rows else None)
        if done is not None:
            self.output.emit(self.output.take(done, *self.runner.read(done)))

    def _launch(self, rows: list[Sequence]) -> LaunchedStep | None:
        try:
            return self.runner.launch(rows)
        except Exception as exc:  # a broken step ends the requests in it, not the loop
            log.exception("decode step failed")
            for seq in rows:
                self.output.finish(seq, f"decode failed: {exc}")
            return None

    def _pace(self, rows: list[Sequence], now: float) -> list[Sequence]:
        """At most `max_batch` rows: the streams that need frames most (scheduler/pacing.py), in running order."""
        if len(rows) <= self.config.max_batch:
            return rows
        rate = self.model.frame_rate
        streams = [PacedStream(s.request_id, s.arrival_time, s.buffered_s(now, rate)) for s in rows]
        return [rows[i] for i in pick_rows(streams, self.config.max_batch)]

    def _retire(self) -> None:
        for seq in [s for s in self._running if s.status is SeqStatus.FINISHED]:
            self._running.remove(seq)
            self._free_slot(seq)

    def _apply_text(self) -> None:
        """Feed the text pieces that came; end the requests whose text was bad or stopped coming."""
        now, live = self._clock(), self._running + self._waiting
        endings = self._text.apply(live) + self._input.apply(live)
        for seq, ended in endings + idle_endings(live, now) + input_idle_endings(live, now):
            self.output.finish(seq, ended)
            if seq in self._waiting:
                self._waiting.remove(seq)
        blocked = [seq for seq in self._running if seq.is_segmented and segments.is_blocked(seq)
                   and seq.status is not SeqStatus.FINISHED]
        self.output.emit([(seq, segments.settle(seq)) for seq in blocked])

    def _apply_taken(self) -> None:
        with self._cancel_lock:
            taken, self._taken = self._taken, {}
        if taken:
            for seq in self._running + self._waiting:
                if seq.request_id in taken and seq.unread is not None:
                    seq.unread.on_taken(taken[seq.request_id])

    def _drop_cancelled(self) -> None:
        with self._cancel_lock:
            ids, self._cancel_ids = self._cancel_ids, set()
        if ids:
            for seq in self._running + self._waiting:
                seq.is_cancelled = seq.is_cancelled or seq.request_id in ids
        for seq in [s for s in self._running + self._waiting if s.is_cancelled]:
            self.output.finish(seq, EndReason.CANCELLED)
            if seq in self._waiting:
                self._waiting.remove(seq)

    def _reset(self, reason: str) -> None:
        """End every live request with `reason` and free all slots."""
        self.runner.drop_pending()
        self._fail_all(reason)
        for seq in self._running:
            self._free_slot(seq)
        self._running, self._waiting = [], []

    def _fail_all(self, reason: str | Ended) -> None:
        for seq in self._running + self._waiting:
            self.output.finish(seq, reason)
