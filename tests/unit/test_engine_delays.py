"""A family with a codebook delay pattern through the real LMEngine, against its undelayed twin: the same
complete frames and chunks, each frame max-delay steps later, and the end of speech counted down to the step
the last codebook closes (models/delay_pattern.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from backend_python.engine import segments
from backend_python.engine.engine import EngineConfig, LMEngine
from backend_python.engine.sequence import Sequence
from backend_python.models.base import DecodeBatch, Prompt, SamplingParams, SpeechLM
from backend_python.models.delay_pattern import DelayPattern, FrameAssembler
from scheduler import AdmissionPolicyName, ChunkingConfig, SchedulerConfig
from tests.unit.test_engine import ListSink

NUM_CODEBOOKS = 4
BOS, EOS = -1, -2  # a delayed row's padding: codes no frame has


def code(seed: int, frame: int, codebook: int) -> int:
    return 10_000 * seed + 10 * frame + codebook


class TwinLM(SpeechLM):
    """A deterministic fake family: stream `seed`'s frame k is code(seed, k, j) for j < K, and its speech ends
    after the frames its prompt asks for. Undelayed, step s emits frame s (and the end at step N); delayed,
    step s emits codebook j of frame s - d_j, BOS / EOS where that frame does not exist, and reports the end
    once codebook 0 has none left. It counts each slot's steps (one KV position each)."""

    frame_rate = 12.5
    voices = ()

    def __init__(self, delays: tuple[int, ...] | None = None) -> None:
        super().__init__()
        self.codebook_delays = delays
        self._anchor = nn.Parameter(torch.zeros(1))  # SpeechLM.device reads the parameters
        self._slots: dict[int, dict] = {}
        self.steps: dict[int, int] = {}  # seed -> decode steps its stream ran

    @property
    def num_codebooks(self) -> int:
        return NUM_CODEBOOKS

    def encode_prompt(self, text, voice, reference=None) -> Prompt:
        seed, num_frames = (int(part) for part in text.split(":"))
        return Prompt(num_tokens=3, tensors={"seed": torch.tensor(seed), "frames": torch.tensor(num_frames)})

    def allocate_slots(self, num_slots, max_seq_len, max_batch=None, kv_positions=None) -> None:
        self._slots = {}

    def prefill(self, slot: int, prompt: Prompt) -> None:
        seed = int(prompt.tensors["seed"])
        self._slots[slot] = {"seed": seed, "frames": int(prompt.tensors["frames"]), "step": 0}
        self.steps[seed] = 0

    def decode(self, batch: DecodeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        rows, ends = [], []
        for slot, ignore_eos in zip(batch.slots, batch.ignore_eos):
            state = self._slots[slot]
            num_frames = None if ignore_eos else state["frames"]
            rows.append(self._row(state["seed"], state["step"], num_frames))
            ends.append(num_frames is not None and state["step"] >= num_frames)
            state["step"] += 1
            self.steps[state["seed"]] += 1
        return torch.tensor(rows), torch.tensor(ends)

    def _row(self, seed: int, step: int, num_frames: int | None) -> list[int]:
        delays = self.codebook_delays or (0,) * NUM_CODEBOOKS
        frames = [step - delay for delay in delays]
        return [BOS if k < 0 else EOS if num_frames is not None and k >= num_frames else code(seed, k, j)
                for j, k in enumerate(frames)]

    def release(self, slot: int) -> None:
        self._slots.pop(slot, None)


DELAYS = [(0, 1, 2, 3), (0, 3, 1, 1), (0, 1, 1, 1)]


def make_engine(model: TwinLM, overlap: bool, max_slots: int = 4) -> LMEngine:
    chunking = ChunkingConfig(first_chunk_frames=2, chunk_frames=5, chunk_growth=None)
    config = EngineConfig(max_slots=max_slots, max_seq_len=256, codec_left_context_frames=3, overlap_steps=overlap,
                          overlap_min_rows=1, num_delay_steps=model.num_delay_steps,
                          scheduler=SchedulerConfig(chunking=chunking,
                                                    admission_policy=AdmissionPolicyName.PREFILL_FIRST))
    return LMEngine(model, config)


class Served:
    """One stream's run: its sink, the engine step each chunk arrived at, and the step it ended at."""

    def __init__(self, model: TwinLM, seed: int, num_frames: int, ignore_eos: bool = False,
                 max_frames: int = 100) -> None:
        self.sink = ListSink()
        self.seq = Sequence(request_id=f"s{seed}", prompt=model.encode_prompt(f"{seed}:{num_frames}", None),
                            sampling=SamplingParams(), ignore_eos=ignore_eos, max_frames=max_frames,
                            sink=self.sink, generator=torch.Generator().manual_seed(seed))
        self.chunk_steps: list[int] = []
        self.end_step: int | None = None

    def observe(self, step: int) -> None:
        self.chunk_steps += [step] * (len(self.sink.chunks) - len(self.chunk_steps))
        if self.sink.done.is_set() and self.end_step is None:
            self.end_step = step


def serve(model: TwinLM, streams: list[tuple[int, int]], overlap: bool, starts: list[int] | None = None,
          max_slots: int = 4, **stream_options) -> list[Served]:
    """Run (seed, frames) streams through one engine, stream i added before step starts[i]."""
    engine = make_engine(model, overlap, max_slots)
    served = [Served(model, seed, frames, **stream_options) for seed, frames in streams]
    starts = starts or [0] * len(streams)
    for step in range(300):
        for run, start in zip(served, starts):
            if start == step:
                engine.add(run.seq)
        engine._collect(0)
        engine.step()
        for run in served:
            run.observe(step)
        if all(run.end_step is not None for run in served):
            return served
    raise AssertionError("streams did not finish")


def assert_same_chunks(delayed: Served, twin: Served) -> None:
    """The same chunks, and the delayed stream's last one marked last. (A twin whose frames end on a chunk
    boundary cuts that chunk before it learns of its end, one step later, and so sends it unmarked; the
    delayed stream knows its end when its last frame completes.)"""
    assert delayed.sink.error is None and twin.sink.error is None
    assert len(delayed.sink.chunks) == len(twin.sink.chunks)
    for a, b in zip(delayed.sink.chunks, twin.sink.chunks):
        assert (a.chunk_index, a.start_frame, a.context_frames) == (b.chunk_index, b.start_frame, b.context_frames)
        assert torch.equal(a.tokens, b.tokens)
    assert [c.is_last for c in delayed.sink.chunks] == [False] * (len(delayed.sink.chunks) - 1) + [True]


def frames_of(run: Served) -> list[list[int]]:
    return [frame for c in run.sink.chunks for frame in c.tokens[c.context_frames:].tolist()]


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("delays", DELAYS)
def test_a_delayed_stream_serves_its_twins_chunks_max_delay_steps_later(delays, overlap):
    num_frames, max_delay = 13, max(delays)  # chunks of 2, 5, 5, 1 frames: the last one waits for the end
    (twin,) = serve(TwinLM(), [(7, num_frames)], overlap)
    (delayed,) = serve(TwinLM(delays), [(7, num_frames)], overlap)
    assert_same_chunks(delayed, twin)
    assert frames_of(twin) == [[code(7, k, j) for j in range(NUM_CODEBOOKS)] for k in range(num_frames)]
    assert [c.num_new_frames for c in delayed.sink.chunks] == [2, 5, 5, 1]
    # every chunk whose frames the twin had before its end comes max-delay steps later, the first one too
    assert delayed.chunk_steps[:-1] == [step + max_delay for step in twin.chunk_steps[:-1]]
    # the twin learns of its end one step after its last frame; the delayed stream ends at the step its last
    # frame's last codebook comes, with the final chunk, max-delay steps after the twin's last frame
    twin_last_frame_step = twin.end_step - 1
    assert delayed.end_step == delayed.chunk_steps[-1] == twin_last_frame_step + max_delay
    assert [c.is_last for c in delayed.sink.chunks] == [c.is_last for c in twin.sink.chunks]


@pytest.mark.parametrize("overlap", [False, True])
def test_the_countdown_runs_only_the_steps_that_close_the_last_codebooks(overlap):
    delays, num_frames = (0, 1, 2, 3), 9
    twin_model, delayed_model = TwinLM(), TwinLM(delays)
    serve(twin_model, [(3, num_frames)], overlap)
    serve(delayed_model, [(3, num_frames)], overlap)
    # the twin's steps: its frames, then its end; the delayed one's: its frames and max-delay more (the first
    # of which reports the end): max-delay - 1 more than the twin
    assert delayed_model.steps[3] == twin_model.steps[3] + max(delays) - 1


@pytest.mark.parametrize("overlap", [False, True])
def test_a_length_capped_delayed_stream_stays_within_its_kv_extent(overlap):
    delays, max_frames = (0, 2, 1, 3), 11
    twin_model, delayed_model = TwinLM(), TwinLM(delays)
    (twin,) = serve(twin_model, [(5, 0)], overlap, ignore_eos=True, max_frames=max_frames)
    (delayed,) = serve(delayed_model, [(5, 0)], overlap, ignore_eos=True, max_frames=max_frames)
    assert_same_chunks(delayed, twin)
    assert len(frames_of(delayed)) == max_frames
    prompt_tokens = delayed.seq.prompt.num_tokens
    extent = delayed_model.kv_positions_for(prompt_tokens, max_frames) - prompt_tokens  # positions for its steps
    assert delayed_model.steps[5] == (extent if overlap else extent - 1)  # the spare overlapped row fits too
    assert delayed_model.steps[5] == twin_model.steps[5] + max(delays)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_batch_of_delayed_streams_at_different_offsets_serves_each_twins_chunks(overlap):
    # more than the slots: slots are reused mid-run; 7 frames end on a chunk boundary (2 + 5)
    streams = [(1, 13), (2, 4), (3, 9), (4, 1), (5, 7)]
    starts = [0, 0, 2, 3, 6]
    twins = serve(TwinLM(), streams, overlap, starts, max_slots=3)
    delayed = serve(TwinLM((0, 1, 2, 3)), streams, overlap, starts, max_slots=3)
    for a, b in zip(delayed, twins):
        assert_same_chunks(a, b)
        assert len(frames_of(a)) == int(a.seq.prompt.tensors["frames"])


@pytest.mark.parametrize("overlap", [False, True])
def test_a_stream_cancelled_mid_countdown_ends_cancelled_with_complete_frames_only(overlap):
    delays, num_frames = (0, 1, 2, 3), 13
    (twin,) = serve(TwinLM(), [(9, num_frames)], overlap)
    model = TwinLM(delays)
    engine = make_engine(model, overlap)
    run = Served(model, 9, num_frames)
    engine.add(run.seq)
    while model.steps.get(9, 0) <= num_frames + overlap:  # until the engine has read codebook 0's end
        engine._collect(0)
        engine.step()
    assert not run.sink.done.is_set()  # counting down: the last frames still miss codebooks
    assert run.seq.num_frames == num_frames - max(delays) + 1
    engine.cancel_id(run.seq.request_id)
    engine._collect(0)
    engine.step()
    assert run.sink.error == "cancelled"
    sent = run.sink.chunks
    assert sent and not any(c.is_last for c in sent)
    assert frames_of(run) == frames_of(twin)[:len(frames_of(run))]  # a prefix of the twin's complete frames
    assert sorted(engine.scheduler.free_slots) == [0, 1, 2, 3]


def test_the_engine_refuses_a_config_that_does_not_count_the_models_delay_steps():
    model = TwinLM((0, 1, 2, 3))
    with pytest.raises(ValueError, match="num_delay_steps is 0 but TwinLM delays its codebooks by up to 3"):
        LMEngine(model, EngineConfig(max_slots=2, max_seq_len=64))


def test_the_length_check_and_the_kv_extent_count_the_delay_steps():
    config = EngineConfig(max_seq_len=64, num_delay_steps=3)
    assert config.length_error(TwinLM((0, 1, 2, 3)).kv_positions_for(40, 20), 40, 20) is None
    assert config.length_error(TwinLM((0, 1, 2, 3)).kv_positions_for(40, 21), 40, 21) == ("request needs 65 positions (prompt 40 tokens + 21 frames + 3 codebook "
                                           "delay steps) but the server's max_seq_len is 64")
    assert TwinLM((0, 1, 2, 3)).kv_positions_for(40, 20) == TwinLM().kv_positions_for(40, 20) + 3


def test_a_delayed_segment_at_its_limit_blocks_only_after_its_frames_delay_steps():
    """A segment's limit counts frames: a delayed family launches max-delay more steps to complete them."""
    text = SimpleNamespace(is_last=False, budget_frames=lambda: 6)  # a segment of 6 frames, more text after it
    seq = Sequence(request_id="s", prompt=None, sampling=SamplingParams(), ignore_eos=True, max_frames=50,
                   sink=ListSink(), generator=torch.Generator(), text=text,
                   assembler=FrameAssembler(DelayPattern((0, 1, 2, 3))))
    seq.segment.num_launched = 8
    assert not segments.is_blocked(seq)
    seq.segment.num_launched = 9  # frame 5's last codebook is on its way
    assert segments.is_blocked(seq)
