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
from dataclasses import replace
from typing import Callable

import torch

from backend_python.engine.codec_runner import CodecRunner, StreamChunk, decode_windowed
from backend_python.engine import kv_memory
from backend_python.engine.config import EngineConfig, KVLayout  # EngineConfig re-exported: the LM model imports it here
from protocol.reasons import SHUTTING_DOWN, Ended, EndReason
from backend_python.engine import segments
from backend_python.engine.segments import Progress
from backend_python.engine.chunk_cutter import ChunkCutter
from backend_python.engine.launched_step import LaunchedStep
from backend_python.engine.sequence import Chunk, Sequence, SeqStatus
from backend_python.engine.input_pieces import InputPieces, input_idle_endings, past_cap_ending
from backend_python.engine.text_pieces import TextPieces, idle_endings
from backend_python.engine.timing import LoopPhase, Occupancy, PhaseClock, StepTiming
from backend_python.models.base import Codec, CodecWindowing, DecodeBatch, SpeechLM
from backend_python.models.delay_pattern import FrameAssembler
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
        _check_delays(model, config)
        self.model = model
        self.codec = codec
        self.refiner = refiner
        self.config = config
        self._clock = clock
        self._on_step = on_step
        self._admission = make_admission_policy(config.scheduler)
        self._timing = StepTiming()
        self.phases = PhaseClock(clock)  # read by the lane's metrics
        self._is_overlapped = (config.overlap_steps if config.overlap_steps is not None
                               else model.device.type == "cuda")
        self._pending: LaunchedStep | None = None  # the step whose codes are still on their way
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
        self._chunks = ChunkCutter(config.scheduler.chunking, CodecWindowing(
            config.codec_left_context_frames, config.codec_lookahead_frames, config.codec_overlap_frames))
        self._kv = self._allocate(model, config)  # None: static rows, a slot is all a stream needs
        self._thread = threading.Thread(target=self._loop, name="voxlane-lm-engine", daemon=True)

    @staticmethod
    def _allocate(model: SpeechLM, config: EngineConfig) -> KVBlocks | None:
        """The model's slot memory: a KV pool sized from the memory budget and its block allocator, or static
        rows (None)."""
        if config.kv_layout is KVLayout.STATIC:
            model.allocate_slots(config.max_slots, config.max_seq_len, config.max_batch)
            return None
        positions = kv_memory.pool_positions(model, config)
        model.allocate_slots(config.max_slots, config.max_seq_len, config.max_batch, positions)
        log.info("KV pool: %d positions (%.2f GB) for up to %d streams, steps of up to %d rows", positions,
                 positions * model.kv_bytes_per_position() / 2**30, config.max_slots, config.max_batch)
        return KVBlocks(positions, config.kv_block_size)

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
        if self._pending or self._can_admit():
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
        launched = self._launch()
        if not self._is_overlapped and launched is not None:
            launched, self._pending = None, launched
        if self._pending is not None:  # overlapped: the previous step's host work hides behind this one
            self._process(self._pending)
        self._pending = launched
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
                self._finish(seq, str(exc))
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
            self.model.place(seq.slot, seq.kv_extent.start, seq.kv_extent.num_positions)

    def _free_slot(self, seq: Sequence) -> None:
        """Give back `seq`'s slot and KV extent (the model forgets the slot; its next prefill overwrites it)."""
        self._release(seq.slot)
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
        """One batched prefill; if it fails, each request again alone, so a bad one ends only itself."""
        self.phases.charge(LoopPhase.HOST)
        started = self._clock()
        try:
            self.model.prefill_batch([s.slot for s in seqs], [s.prompt for s in seqs])
        except Exception as exc:  # one request's bad prefill ends that request only
            self.phases.charge(LoopPhase.PREFILL)
            if len(seqs) == 1:
                self._fail_prefill(seqs[0], exc)
            else:
                for seq in seqs:
                    self._prefill([seq])
            return
        self.phases.charge(LoopPhase.PREFILL)
        self._timing.observe_prefill(sum(s.prompt.num_tokens for s in seqs), self._clock() - started)
        for seq in seqs:
            seq.status = SeqStatus.RUNNING
            self._running.append(seq)
            self._start_codes(seq)
            _start_words(seq)

    def _fail_prefill(self, seq: Sequence, exc: Exception) -> None:
        log.warning("prefill of %s failed: %s", seq.request_id, exc)
        self._free_slot(seq)
        self._finish(seq, str(exc))

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
            self.phases.charge(LoopPhase.HOST)
            started = self._clock()
            try:
                if not self._fit_segment(seq, self._kv_need(seq)):
                    continue  # the pool is full: the segment's prefill is tried again next step
                self._release(seq.slot)
                self.model.prefill_batch([seq.slot], [seq.prompt])
            except Exception as exc:  # a bad segment ends its request only
                log.warning("prefill of a text segment of %s failed: %s", seq.request_id, exc)
                self._finish(seq, str(exc))
                continue
            finally:
                self.phases.charge(LoopPhase.PREFILL)
            self._timing.observe_prefill(seq.prompt.num_tokens, self._clock() - started)
            segments.start_segment(seq)
            self._start_codes(seq)
            _start_words(seq)

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

    def _launch(self) -> "LaunchedStep | None":
        """Launch one frame for every running request not paused on its client; its codes are copied to
        the host asynchronously. None when there is nothing to launch."""
        now = self._clock()
        rows = self._pace([seq for seq in self._running if self._can_decode(seq, now)], now)
        if not rows:
            return None
        batch = DecodeBatch(slots=[s.slot for s in rows], sampling=[s.sampling for s in rows],
                            generators=[s.generator for s in rows], ignore_eos=[s.ignore_eos for s in rows])
        self.phases.charge(LoopPhase.HOST)
        for seq in rows:
            seq.segment.num_launched += self.model.frames_per_step
        try:
            codes, is_eos = self.model.decode(batch)
            launched = LaunchedStep.start(rows, codes, is_eos, self._clock())
        except Exception as exc:  # a broken step ends the requests in it, not the loop
            log.exception("decode step failed")
            for seq in rows:
                self._finish(seq, f"decode failed: {exc}")
            return None
        finally:
            self.phases.charge(LoopPhase.DECODE)
            self.phases.on_step(len(rows))
        return launched

    def _pace(self, rows: list[Sequence], now: float) -> list[Sequence]:
        """At most `max_batch` rows: the streams that need frames most (scheduler/pacing.py), in running order."""
        if len(rows) <= self.config.max_batch:
            return rows
        rate = self.model.frame_rate
        streams = [PacedStream(s.request_id, s.arrival_time, s.buffered_s(now, rate)) for s in rows]
        return [rows[i] for i in pick_rows(streams, self.config.max_batch)]

    def _process(self, step: LaunchedStep) -> None:
        """Read a launched step's codes (waiting for the GPU), then cut and deliver its chunks."""
        self.phases.charge(LoopPhase.HOST)
        codes, is_eos = step.wait()
        self.phases.charge(LoopPhase.DECODE)
        self._timing.observe_step(self._clock() - step.launched_at)
        progress = []
        for row, seq in enumerate(step.rows):
            # ended while the step ran (overlapped), or a row of a segment that has ended: a spare row
            if seq.status is SeqStatus.FINISHED or seq.segment.index != step.segments[row]:
                continue
            progress.append((seq, self._advance_step(seq, codes[row], is_eos[row])))
        self._progress(progress)

    def _start_codes(self, seq: Sequence) -> None:
        """A prompt was prefilled into `seq`'s slot: a delayed family's codes start their delay pattern anew."""
        pattern = self.model.delay_pattern
        seq.assembler = None if pattern is None else FrameAssembler(pattern)

    def _advance_step(self, seq: Sequence, codes: torch.Tensor, is_eos: torch.Tensor) -> Progress:
        """Take a step's frames for one row up to its first end of speech or until the request is no longer
        going (a delayed family's first steps take none)."""
        progress = Progress.GOING
        for frame, eos in _step_frames(seq, codes, is_eos):
            progress = self._advance(seq, frame, eos)
            if progress is not Progress.GOING:
                break
        return progress

    def _advance(self, seq: Sequence, frame: torch.Tensor | None, is_eos: bool) -> Progress:
        """Append the step's frame; where the request stands."""
        if not is_eos:
            seq.frames.append(frame)
        if seq.is_length_capped:
            return Progress.DONE
        if seq.is_segmented:
            return segments.after_frame(seq, is_eos)
        return Progress.DONE if is_eos else Progress.GOING

    def _condition(self, seq: Sequence) -> torch.Tensor | None:
        """The stream's codec condition (a flow decoder's speaker embedding) from its current prompt."""
        if seq.prompt is not None:
            seq.codec_condition = self.model.codec_condition(seq.prompt)
        return seq.codec_condition

    def _progress(self, progress: list[tuple[Sequence, Progress]]) -> None:
        """Cut and deliver the chunks that are ready; move spoken segments on; finish what is done."""
        self._deliver([(seq, self._for_refinement(seq, chunk)) for seq, p in progress
                       for chunk in _timed(seq, p, self._chunks.cut(seq, is_finished=p is not Progress.GOING,
                                                                    is_done=p is Progress.DONE,
                                                                    condition=self._condition(seq)))])
        for seq, p in progress:
            if p is Progress.SEGMENT_SPOKEN:
                segments.end_segment(seq)
            elif p is Progress.WAITING:
                segments.chunks_sent(seq)
            elif p is Progress.DONE:
                self._finish(seq, past_cap_ending(seq, self.model.frame_rate))

    def _for_refinement(self, seq: Sequence, chunk: Chunk) -> Chunk:
        """A cascade's chunk carries its stream's context for the refinement lane (SpeechLM.refine_context)."""
        context = self.model.refine_context(seq.prompt) if seq.prompt is not None else None
        return chunk if context is None else replace(chunk, refine_context=context,
                                                     segment_start=seq.segment.first_frame)

    def _deliver(self, ready: list[tuple[Sequence, Chunk]]) -> None:
        """Hand chunks to their sinks; with an inline codec, decode them first in one batch."""
        if self.codec is not None and ready:
            ready = self._decode_inline(ready)
        for seq, chunk in ready:
            if seq.t_first_emitted is None:
                seq.t_first_emitted = self._clock()
            seq.emitted_frames = chunk.start_frame + chunk.num_new_frames
            try:
                seq.sink.emit(chunk)
            except Exception as exc:  # the client is gone: stop generating for it, keep the others
                log.warning("sending a chunk of %s failed, dropping it: %s", seq.request_id, exc)
                seq.is_cancelled = True

    def _decode_inline(self, ready: list[tuple[Sequence, Chunk]]) -> list[tuple[Sequence, Chunk]]:
        try:
            if self.refiner is not None:
                ready = self._refine_inline(ready)
            audio = self._inline_audio(ready)
        except (RuntimeError, ValueError) as exc:
            log.exception("inline codec decode failed")
            for seq, _ in ready:
                self._finish(seq, f"codec failed: {exc}")
            return []
        return [(seq, replace(chunk, audio=pcm.float().cpu())) for (seq, chunk), pcm in zip(ready, audio)]

    def _refine_inline(self, ready: list[tuple[Sequence, Chunk]]) -> list[tuple[Sequence, Chunk]]:
        """A cascade's chunks as whole frames, their other codebooks refined in one batch: each reads its stream's
        first codebook so far and continues the codes refined for its earlier frames (as the refinement lanes
        do for the router: vox_ensemble/refiner_lanes.py)."""
        asks = []
        for seq, chunk in ready:
            end = chunk.start_frame - chunk.context_frames + chunk.tokens.shape[0]
            if seq.refined is None:
                seq.refined = torch.zeros(0, self.refiner.width, dtype=torch.long)
            if chunk.refine_context is not None and end > seq.refined.shape[0]:
                start = chunk.segment_start  # a segment is refined alone: its own text, its own codes
                semantic = torch.cat([f.reshape(-1)[:1] for f in seq.frames[start:end]]).cpu()
                asks.append((seq, self.refiner.request(semantic.numpy(), seq.refined[start:].numpy(),
                                                       chunk.refine_context.numpy())))
        for (seq, _), codes in zip(asks, self.refiner.refine([ask for _, ask in asks]) if asks else []):
            seq.refined = torch.cat((seq.refined, torch.from_numpy(codes).long()))
        whole = []
        for seq, chunk in ready:
            start = chunk.start_frame - chunk.context_frames
            others = seq.refined[start:start + chunk.tokens.shape[0]] if chunk.refine_context is not None else None
            whole.append((seq, chunk if others is None
                          else replace(chunk, tokens=torch.cat((chunk.tokens, others.to(chunk.tokens.dtype)), 1))))
        return whole

    def _inline_audio(self, ready: list[tuple[Sequence, Chunk]]) -> list[torch.Tensor]:
        """The chunks' new samples (and their overlap): through the runner's stream states where it keeps them,
        else windowed."""
        device = self.model.device
        chunks = [StreamChunk(seq.request_id, chunk.tokens.to(device), chunk.context_frames, chunk.start_frame,
                              chunk.is_last, chunk.lookahead_frames,
                              None if chunk.condition is None else chunk.condition.to(device))
                  for seq, chunk in ready]
        if isinstance(self.codec, CodecRunner):
            return self.codec.decode_chunks(chunks)
        return decode_windowed(self.codec, chunks)

    def _finish(self, seq: Sequence, error: str | EndReason | Ended | None) -> None:
        if seq.status is SeqStatus.FINISHED:
            return
        seq.status = SeqStatus.FINISHED
        if isinstance(self.codec, CodecRunner) and error is not None:
            self.codec.release_stream(seq.request_id)  # a stream that ended early keeps no codec state
        try:
            seq.sink.finish(error)
        except Exception as exc:  # a dead client must not take the loop with it
            if seq.is_cancelled:  # its sink already failed (the router died): said once, no trace
                log.warning("finishing %s failed too: %s", seq.request_id, exc)
            else:
                log.exception("finishing %s failed", seq.request_id)

    def _retire(self) -> None:
        for seq in [s for s in self._running if s.status is SeqStatus.FINISHED]:
            self._running.remove(seq)
            self._free_slot(seq)

    def _apply_text(self) -> None:
        """Feed the text pieces that came; end the requests whose text was bad or stopped coming."""
        now, live = self._clock(), self._running + self._waiting
        endings = self._text.apply(live) + self._input.apply(live)
        for seq, ended in endings + idle_endings(live, now) + input_idle_endings(live, now):
            self._finish(seq, ended)
            if seq in self._waiting:
                self._waiting.remove(seq)
        blocked = [seq for seq in self._running if seq.is_segmented and segments.is_blocked(seq)
                   and seq.status is not SeqStatus.FINISHED]
        self._progress([(seq, segments.settle(seq)) for seq in blocked])

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
            self._finish(seq, EndReason.CANCELLED)
            if seq in self._waiting:
                self._waiting.remove(seq)

    def _reset(self, reason: str) -> None:
        """End every live request with `reason` and free all slots."""
        self._pending = None
        self._fail_all(reason)
        for seq in self._running:
            self._free_slot(seq)
        self._running, self._waiting = [], []

    def _release(self, slot: int) -> None:
        try:
            self.model.release(slot)
        except Exception:  # the slot is reset anyway; its next prefill overwrites it
            log.exception("releasing slot %d failed", slot)

    def _fail_all(self, reason: str | Ended) -> None:
        for seq in self._running + self._waiting:
            self._finish(seq, reason)


def _check_delays(model: SpeechLM, config: EngineConfig) -> None:
    """A delayed family emits one row of its K codebooks per step, and the config's length check counts its
    delay steps."""
    pattern = model.delay_pattern
    if pattern is None:
        return
    if pattern.num_codebooks != model.num_codebooks or model.frames_per_step != 1:
        raise ValueError(f"{type(model).__name__}: codebook_delays need one delay per codebook "
                         f"({model.num_codebooks}) and one frame per step")
    if config.num_delay_steps != pattern.max_delay:
        raise ValueError(f"EngineConfig.num_delay_steps is {config.num_delay_steps} but "
                         f"{type(model).__name__} delays its codebooks by up to {pattern.max_delay} steps")


def _step_frames(seq: Sequence, codes: torch.Tensor,
                 is_eos: torch.Tensor) -> list[tuple[torch.Tensor | None, bool]]:
    """A row's frames in order, each with whether it is the end of speech (no audio): one ([K] codes), several
    from a multi-token model ([M, K], is_eos [M]), or the complete frames a delayed family's row releases and,
    once its last codebook closed, the end (models/delay_pattern.py)."""
    if seq.assembler is not None:
        assembled = seq.assembler.push(codes, bool(is_eos))
        return [(frame, False) for frame in assembled.frames] + ([(None, True)] if assembled.is_closed else [])
    if codes.dim() == 1:
        return [(codes, bool(is_eos))]
    return list(zip(codes, is_eos.tolist()))


def _start_words(seq: Sequence) -> None:
    """A segmented stream's word clock learns where the segment just prefilled starts, and its words."""
    if seq.words is not None and seq.is_segmented:
        seq.words.start_segment(seq.segment.first_frame, seq.text.current_text)


def _timed(seq: Sequence, progress: Progress, chunks: list[Chunk]) -> list[Chunk]:
    """The chunks with the words they speak, for a stream that asked for them (word_clock.py)."""
    clock = seq.words
    if clock is None:
        return chunks
    if progress is Progress.SEGMENT_SPOKEN:
        clock.end_segment(seq.num_frames)
    elif progress is Progress.DONE:
        clock.end(seq.num_frames, is_cut=seq.is_length_capped)
    return [replace(chunk, words=tuple(clock.due(chunk.start_frame + chunk.num_new_frames))) for chunk in chunks]
