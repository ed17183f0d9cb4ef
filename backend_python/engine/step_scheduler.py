"""Which streams a step serves: the engine's use of the policies in scheduler/.

The scheduler holds the streams' residency in plain Python: the waiting requests, the running ones, the free
slots and, with a pooled cache, the KV blocks (scheduler/kv_blocks.py). The runner holds the memory they name;
it is told when an extent is placed and when a slot is given back (`SlotMemory`). Each step asks twice: whom to
admit (prefill) and which rows decode. A stream prefilled in this step decodes its first frame in the same step,
and whether it can (its text, its input) is the model's state after the prefill: one plan made before the prefill
would hold it back a step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from backend_python.engine import segments
from backend_python.engine.config import EngineConfig
from backend_python.engine.sequence import Sequence, SeqStatus
from backend_python.engine.timing import Occupancy, StepTiming
from backend_python.models.base import SpeechLM
from scheduler import (AdmissionState, KVBlocks, PacedStream, StreamStatus, WaitingRequest, make_admission_policy,
                       pick_rows)


class SlotMemory(Protocol):
    """Where the slots' keys live (the model runner)."""

    def place(self, seq: Sequence) -> None:
        """`seq`'s slot now writes its keys at its KV extent."""

    def release(self, slot: int) -> None:
        """The slot is given back: the model forgets it."""


@dataclass
class Admission:
    """The requests let in this step, each with a slot, a KV extent and its chunk plan, in arrival order; and
    those refused at once (too long for `max_seq_len`) with why."""

    ready: list[Sequence] = field(default_factory=list)
    refused: list[tuple[Sequence, str]] = field(default_factory=list)


class StepScheduler:
    def __init__(self, config: EngineConfig, model: SpeechLM, memory: SlotMemory, timing: StepTiming,
                 clock: Callable[[], float], kv_positions: int | None) -> None:
        """`model` answers the scheduler's questions only (its frame rate, the positions a stream writes, whether
        a slot waits for text or input); `kv_positions` is the pool's size, None for static rows (a slot is all a
        stream needs)."""
        self.config = config
        self._model = model
        self._memory = memory
        self._timing = timing
        self._clock = clock
        self._admission = make_admission_policy(config.scheduler)
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.free_slots = list(range(config.max_slots))
        self.kv = None if kv_positions is None else KVBlocks(kv_positions, config.kv_block_size)

    @property
    def live(self) -> list[Sequence]:
        """Every request the engine holds: running first, then waiting."""
        return self.running + self.waiting

    # ---- admission -----------------------------------------------------------------
    def admit(self) -> Admission:
        """The waiting requests the admission policy lets in, in arrival order; the first whose KV extent does
        not fit the pool waits, and those behind it with it."""
        admitted = set(self._admission.admit(self.admission_state()))
        admission = Admission()
        for seq in [s for s in self.waiting if s.request_id in admitted and s.prompt is not None]:
            try:
                need = self.kv_need(seq)
            except ValueError as exc:
                self.waiting.remove(seq)
                admission.refused.append((seq, str(exc)))
                continue
            if not self._take_slot(seq, need):
                break
            self.waiting.remove(seq)
            admission.ready.append(seq)
            if seq.t_admitted is None:
                seq.t_admitted = self._clock()
        self._plan_chunks(admission.ready)
        return admission

    def _plan_chunks(self, ready: list[Sequence]) -> None:
        """Each admitted stream's chunk plan from the load it joins (ChunkingConfig.for_stream)."""
        chunking = self.config.scheduler.chunking
        for beside, seq in enumerate(ready, start=len(self.running)):
            plan = chunking.for_stream(beside, self._timing.step_s, 1.0 / self._model.frame_rate)
            seq.first_chunk_frames, seq.chunk_frames = plan.first_chunk_frames, plan.chunk_frames

    def can_admit(self) -> bool:
        """A slot is free and the first request with its prompt fits the KV pool (admission is FIFO)."""
        first = next((seq for seq in self.waiting if seq.prompt is not None), None)
        if not self.free_slots or first is None:
            return False
        try:
            return self.kv is None or self.kv.can_allocate(self.kv_need(first))
        except ValueError:
            return True  # too long: admission refuses it at once

    def admission_state(self) -> AdmissionState:
        now = self._clock()
        # a stream waiting for its text stalls whatever admission does: it is not protected from prefills; nor is
        # one paused on its client, which holds the bound of audio it has not taken: a prefill cannot starve it
        # (its playback clock ran on while it waited, and read as a stall it held every new request back for
        # max_wait_s: 200 slow readers put 2 s and more on everyone's first audio)
        running = [StreamStatus(s.request_id, s.emitted_frames / self._model.frame_rate,
                                s.t_first_emitted) for s in self.running
                   if not self.needs_text(s) and not s.is_paused(now)]
        waiting = [WaitingRequest(s.request_id, s.arrival_time, self._timing.prefill_s(s.prompt.num_tokens))
                   for s in self.waiting if s.prompt is not None]
        return AdmissionState(now=now, num_free_slots=len(self.free_slots), step_time_s=self._timing.step_s,
                              running=running, waiting=waiting)

    def start(self, seqs: list[Sequence]) -> None:
        """The prompts of `seqs` are prefilled: they run."""
        for seq in seqs:
            seq.status = SeqStatus.RUNNING
            self.running.append(seq)

    # ---- slots and KV extents ------------------------------------------------------
    def kv_need(self, seq: Sequence) -> int:
        """The KV positions `seq`'s prompt and frames (its current segment's) write; ValueError past max_seq_len."""
        num_frames = segments.frames_needed(seq) if seq.is_segmented else seq.max_frames
        need = self._model.kv_positions_for(seq.prompt.num_tokens, num_frames)
        error = self.config.length_error(need, seq.prompt.num_tokens, num_frames,
                                         "its text segment" if seq.is_segmented else "request")
        if error is not None:
            raise ValueError(error)
        return need

    def _take_slot(self, seq: Sequence, need: int) -> bool:
        """A slot and a KV extent of `need` positions for `seq`; False (nothing taken) when the pool is full."""
        if self.kv is not None:
            seq.kv_extent = self.kv.allocate(need)
            if seq.kv_extent is None:
                return False
        seq.slot = self.free_slots.pop()
        self._place(seq)
        return True

    def _place(self, seq: Sequence) -> None:
        if seq.kv_extent is not None:
            self._memory.place(seq)

    def free_slot(self, seq: Sequence) -> None:
        """Give back `seq`'s slot and KV extent (the model forgets the slot; its next prefill overwrites it)."""
        self._memory.release(seq.slot)
        self.free_slots.append(seq.slot)
        if seq.kv_extent is not None and self.kv is not None:
            self.kv.free(seq.kv_extent)
        seq.kv_extent = None

    def retire(self) -> None:
        """Free the slots of the running requests that have finished."""
        for seq in [s for s in self.running if s.status is SeqStatus.FINISHED]:
            self.running.remove(seq)
            self.free_slot(seq)

    def drop_waiting(self, seq: Sequence) -> None:
        """`seq` ended before it was admitted."""
        if seq in self.waiting:
            self.waiting.remove(seq)

    def reset(self) -> None:
        """Free every slot and forget every request (their sinks are the caller's to finish)."""
        for seq in self.running:
            self.free_slot(seq)
        self.running, self.waiting = [], []

    # ---- segments ------------------------------------------------------------------
    def segments_due(self) -> list[Sequence]:
        """The segmented requests whose segment was spoken and whose next segment's prompt is here."""
        return [seq for seq in self.running if seq.segment.is_over and seq.prompt is not None]

    def fit_segment(self, seq: Sequence) -> bool:
        """A segment starts its slot's keys anew: grow its KV extent to what the segment needs if it must; False
        when the pool has no room now (it keeps an extent of its old size). ValueError past max_seq_len."""
        need, old = self.kv_need(seq), seq.kv_extent
        if self.kv is None or old is None or old.num_positions >= need:
            return True
        self.kv.free(old)
        seq.kv_extent = self.kv.allocate(need)
        fits = seq.kv_extent is not None
        if not fits:
            seq.kv_extent = self.kv.allocate(old.num_positions)  # the run just freed is free: it fits
        self._place(seq)
        return fits

    # ---- decode --------------------------------------------------------------------
    def decode_rows(self) -> list[Sequence]:
        """The rows of this step's decode: the running requests that can go on, at most `max_batch` of them (the
        streams that need frames most: scheduler/pacing.py), in running order."""
        now = self._clock()
        rows = [seq for seq in self.running if self.can_decode(seq, now)]
        if len(rows) <= self.config.max_batch:
            return rows
        rate = self._model.frame_rate
        streams = [PacedStream(s.request_id, s.arrival_time, s.buffered_s(now, rate)) for s in rows]
        return [rows[i] for i in pick_rows(streams, self.config.max_batch)]

    def can_decode(self, seq: Sequence, now: float) -> bool:
        """Neither paused on its client nor waiting for its text."""
        return not seq.is_paused(now) and not self.needs_text(seq)

    def needs_text(self, seq: Sequence) -> bool:
        if seq.is_segmented:
            return segments.is_blocked(seq)
        if seq.prompt is not None and seq.prompt.input is not None and seq.slot is not None:
            return self._model.is_waiting_for_input(seq.slot)
        return seq.is_text_open and self._model.is_waiting_for_text(seq.slot)

    # ---- the loop's rhythm ---------------------------------------------------------
    def wait_s(self) -> float | None:
        """How long the loop may sleep: 0 with work to do, None (until woken) with none, else until the first
        playback-paced request may go on (every running request is paused)."""
        if self.can_admit() or self.segments_due():
            return 0.0  # a prompt, or a segment's prompt, to prefill
        now = self._clock()
        if any(self.can_decode(seq, now) for seq in self.running):
            return 0.0
        wakes = [t for seq in self.running if (t := seq.resumes_at()) is not None]
        wakes += [t for seq in self.live if (t := seq.text_deadline()) is not None]
        return max(0.0, min(wakes) - now) if wakes else None

    def occupancy(self) -> Occupancy:
        kv = self.kv
        return Occupancy(len(self.running), len(self.waiting), kv.num_used_blocks if kv else 0,
                         kv.num_free_blocks if kv else 0)
