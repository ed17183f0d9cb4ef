"""Runs a step on the family's SpeechLM: the slots' memory, prefill, and the decode step in flight.

The runner owns the tensors (the model's slots, its KV pool, its CUDA graphs, captured when the slots are
allocated) and the GPU's time: each call charges its phase to the engine's `PhaseClock` and feeds the running
estimates (`StepTiming`) the scheduler admits by. With `is_overlapped` (the default on CUDA) a step's codes are
read one step late: step t+1 is launched before step t's codes are read (its inputs do not depend on them: the
sampled codes feed the next frame on the device), and t's copy to the host overlaps t+1.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import torch

from backend_python.engine import kv_memory
from backend_python.engine.config import EngineConfig, KVLayout
from backend_python.engine.launched_step import LaunchedStep
from backend_python.engine.sequence import Sequence
from backend_python.engine.timing import LoopPhase, PhaseClock, StepTiming
from backend_python.models.base import DecodeBatch, SpeechLM

log = logging.getLogger("voxlane.engine")


@dataclass
class Prefilled:
    """A prefill's outcome: the requests whose prompts are in their slots, in order, and those whose prefill
    failed with the error (each tried alone, so a bad prompt fails only itself)."""

    done: list[Sequence] = field(default_factory=list)
    failed: list[tuple[Sequence, Exception]] = field(default_factory=list)


class ModelRunner:
    def __init__(self, model: SpeechLM, config: EngineConfig, phases: PhaseClock, timing: StepTiming,
                 clock: Callable[[], float]) -> None:
        check_delays(model, config)
        self.model = model
        self.phases = phases
        self._timing = timing
        self._clock = clock
        self.is_overlapped = (config.overlap_steps if config.overlap_steps is not None
                              else model.device.type == "cuda")
        self.overlap_min_rows = config.overlap_min_rows  # a smaller step is read before the next is launched
        self.pending: LaunchedStep | None = None  # the step whose codes are still on their way
        self.kv_positions = self._allocate(config)

    def _allocate(self, config: EngineConfig) -> int | None:
        """The model's slot memory: a KV pool sized from the memory budget (its number of positions), or static
        rows (None)."""
        model = self.model
        if config.kv_layout is KVLayout.STATIC:
            model.allocate_slots(config.max_slots, config.max_seq_len, config.max_batch)
            return None
        positions = kv_memory.pool_positions(model, config)
        model.allocate_slots(config.max_slots, config.max_seq_len, config.max_batch, positions)
        log.info("KV pool: %d positions (%.2f GB) for up to %d streams, steps of up to %d rows", positions,
                 positions * model.kv_bytes_per_position() / 2**30, config.max_slots, config.max_batch)
        return positions

    # ---- slot memory (StepScheduler's SlotMemory) ----------------------------------
    def place(self, seq: Sequence) -> None:
        self.model.place(seq.slot, seq.kv_extent.start, seq.kv_extent.num_positions)

    def release(self, slot: int) -> None:
        try:
            self.model.release(slot)
        except Exception:  # the slot is reset anyway; its next prefill overwrites it
            log.exception("releasing slot %d failed", slot)

    # ---- prefill -------------------------------------------------------------------
    def prefill(self, seqs: list[Sequence]) -> Prefilled:
        """One batched prefill of the prompts of `seqs` into their slots; if it fails, each request again alone."""
        outcome = Prefilled()
        self._prefill(seqs, outcome)
        return outcome

    def _prefill(self, seqs: list[Sequence], outcome: Prefilled) -> None:
        self.phases.charge(LoopPhase.HOST)
        started = self._clock()
        try:
            num_run = self.model.prefill_batch([s.slot for s in seqs], [s.prompt for s in seqs])
        except Exception as exc:  # one request's bad prefill ends that request only
            self.phases.charge(LoopPhase.PREFILL)
            if len(seqs) == 1:
                outcome.failed.append((seqs[0], exc))
            else:
                for seq in seqs:
                    self._prefill([seq], outcome)
            return
        self.phases.charge(LoopPhase.PREFILL)
        ended = self._clock()
        self._timing.observe_prefill(num_run, ended - started)
        for seq in seqs:
            if seq.t_prefilled is None:
                seq.t_prefilled = ended
        outcome.done.extend(seqs)

    def prefill_segment(self, seq: Sequence) -> None:
        """Prefill the prompt of `seq`'s next segment into its slot, its keys anew; raises what the model raised."""
        self.phases.charge(LoopPhase.HOST)
        started = self._clock()
        try:
            self.release(seq.slot)
            num_run = self.model.prefill_batch([seq.slot], [seq.prompt])
        finally:
            self.phases.charge(LoopPhase.PREFILL)
        self._timing.observe_prefill(num_run, self._clock() - started)

    # ---- decode --------------------------------------------------------------------
    def launch(self, rows: list[Sequence]) -> LaunchedStep:
        """Launch one frame for each of `rows`; its codes are copied to the host asynchronously. Raises what the
        model raised (the rows' requests end, not the loop)."""
        batch = DecodeBatch(slots=[s.slot for s in rows], sampling=[s.sampling for s in rows],
                            generators=[s.generator for s in rows], ignore_eos=[s.ignore_eos for s in rows])
        self.phases.charge(LoopPhase.HOST)
        for seq in rows:
            seq.segment.num_launched += self.model.frames_per_step
        try:
            codes, is_eos = self.model.decode(batch)
            return LaunchedStep.start(rows, codes, is_eos, self._clock())
        finally:
            self.phases.charge(LoopPhase.DECODE)
            self.phases.on_step(len(rows))

    def in_flight(self, launched: LaunchedStep | None) -> list[LaunchedStep]:
        """The steps whose codes to read now, in launch order: `launched` itself, or, overlapped, the one launched
        before it (which `launched` now hides the host work of). Overlapped, a step of fewer than
        `overlap_min_rows` rows is read at once too, after the one still in flight: at low load no step waits
        queued behind it, so a request that comes meanwhile is prefilled as soon as this one ends."""
        if not self.is_overlapped:
            return [] if launched is None else [launched]
        if launched is not None and len(launched.rows) < self.overlap_min_rows:
            steps, self.pending = [step for step in (self.pending, launched) if step is not None], None
            return steps
        done, self.pending = self.pending, launched
        return [] if done is None else [done]

    def read(self, step: LaunchedStep) -> tuple[torch.Tensor, torch.Tensor]:
        """A launched step's codes ([n, K] or [n, M, K] int64, host) and ends of speech ([n] or [n, M] bool),
        waiting for the GPU."""
        self.phases.charge(LoopPhase.HOST)
        codes, is_eos = step.wait()
        self.phases.charge(LoopPhase.DECODE)
        self._timing.observe_step(self._clock() - step.launched_at)
        return codes, is_eos

    def drop_pending(self) -> None:
        """Forget the step in flight (the engine is resetting: its rows' requests are ended)."""
        self.pending = None


def check_delays(model: SpeechLM, config: EngineConfig) -> None:
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
