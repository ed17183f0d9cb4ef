"""The engine's output stage (engine/output_stage.py, inline_codec.py) alone: a step's codes to frames, frames to
planned chunks, chunks to sinks, ends; and in timeshare the inline codec and a cascade's inline refiner. The
steps are made by hand (no model runs): the tiny Qwen3-TTS gives the stage its facts."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from backend_python.engine.config import EngineConfig
from backend_python.engine.launched_step import LaunchedStep
from backend_python.engine.output_stage import OutputStage
from backend_python.engine.segments import Progress
from backend_python.engine.sequence import Chunk, Sequence, SeqStatus
from backend_python.models.base import SamplingParams
from backend_python.models.qwen3_tts.lm import Qwen3TTSLM
from backend_python.models.qwen3_tts.presets import preset_config
from scheduler import ChunkingConfig, SchedulerConfig


class ListSink:
    def __init__(self, fails: bool = False) -> None:
        self.chunks: list[Chunk] = []
        self.ends: list = []
        self.fails = fails

    def emit(self, chunk: Chunk) -> None:
        if self.fails:
            raise ConnectionError("the client is gone")
        self.chunks.append(chunk)

    def finish(self, error) -> None:
        self.ends.append(error)


class SilenceCodec:
    """An inline codec: zeros of each window's new frames' length; or an error, for `fails`."""

    samples_per_frame, sample_rate, lookahead_frames, overlap_frames = 4, 16, 0, 0
    uses_stream_position = False

    def __init__(self, fails: bool = False) -> None:
        self.fails, self.windows = fails, []

    def decode_windows(self, windows, conditions=None):
        if self.fails:
            raise RuntimeError("out of memory")
        self.windows.extend(codes for codes, _ in windows)
        return [torch.zeros((codes.shape[0] - context) * 4) for codes, context in windows]


class CountingRefiner:
    """A cascade's refiner whose other codebooks are the first one's code + 1 and + 2 (width 2)."""

    width = 2

    def __init__(self) -> None:
        self.asked: list[tuple[list[int], int]] = []  # (the first codebook read, frames refined before)

    def request(self, semantic, refined, context):
        return semantic, refined

    def refine(self, requests):
        self.asked.extend((semantic.tolist(), len(refined)) for semantic, refined in requests)
        return [np.stack([semantic[len(refined):] + 1, semantic[len(refined):] + 2], 1) for semantic, refined in requests]


class CascadeLM:
    """The tiny LM, as a cascade: its prompts carry a refinement context."""

    def __init__(self, lm: Qwen3TTSLM) -> None:
        self._lm = lm

    def refine_context(self, prompt):
        return torch.tensor([7])

    def __getattr__(self, name):
        return getattr(self._lm, name)


@pytest.fixture(scope="module")
def lm() -> Qwen3TTSLM:
    return Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)


def make_stage(model, codec=None, refiner=None) -> OutputStage:
    config = EngineConfig(max_slots=4, max_seq_len=256, codec_left_context_frames=3,
                          scheduler=SchedulerConfig(chunking=ChunkingConfig(first_chunk_frames=2, chunk_frames=3,
                                                                            chunk_growth=None)))
    return OutputStage(model, config, lambda: 5.0, codec, refiner)


def make_seq(lm, name: str, frames: int = 6, sink: ListSink | None = None) -> Sequence:
    seq = Sequence(request_id=name, prompt=lm.encode_prompt(f"{name}.", None), sampling=SamplingParams(),
                   ignore_eos=False, max_frames=frames, sink=sink or ListSink(), generator=torch.Generator(), slot=0)
    seq.status = SeqStatus.RUNNING
    return seq


def step_of(rows: list[Sequence], k: int, code: int, eos: list[bool] | None = None) -> LaunchedStep:
    """A step whose every row's codes are `code` ([n, K] on the host, as a launched step's)."""
    codes = torch.full((len(rows), k), code, dtype=torch.long)
    return LaunchedStep.start(rows, codes, torch.tensor(eos or [False] * len(rows)), now=0.0)


def run(stage: OutputStage, rows: list[Sequence], k: int, num_steps: int, first_code: int = 0) -> None:
    for i in range(num_steps):
        step = step_of(rows, k, first_code + i)
        stage.emit(stage.take(step, step.codes, step.is_eos))


def test_a_steps_codes_become_frames_and_planned_chunks_in_the_sink(lm):
    stage, k = make_stage(lm), lm.num_codebooks
    seq = make_seq(lm, "a", frames=6)
    run(stage, [seq], k, 6)
    assert [c.num_new_frames for c in seq.sink.chunks] == [2, 3, 1] and seq.sink.ends == [None]
    assert [c.context_frames for c in seq.sink.chunks] == [0, 2, 3]
    assert torch.equal(torch.cat([c.tokens[c.context_frames:] for c in seq.sink.chunks])[:, 0], torch.arange(6))
    assert seq.status is SeqStatus.FINISHED and seq.emitted_frames == 6 and seq.t_first_emitted == 5.0


def test_the_end_of_speech_is_no_frame_and_ends_the_stream(lm):
    stage, k = make_stage(lm), lm.num_codebooks
    seq = make_seq(lm, "a", frames=100)
    run(stage, [seq], k, 3)
    step = step_of([seq], k, 9, eos=[True])
    assert stage.take(step, step.codes, step.is_eos) == [(seq, Progress.DONE)]
    assert seq.num_frames == 3  # no frame for the end of speech


def test_a_row_that_ended_while_its_step_ran_is_skipped(lm):
    stage, k = make_stage(lm), lm.num_codebooks
    ended, going = make_seq(lm, "ended"), make_seq(lm, "going")
    step = step_of([ended, going], k, 1)
    stage.finish(ended, "cancelled")
    assert stage.take(step, step.codes, step.is_eos) == [(going, Progress.GOING)]
    assert ended.num_frames == 0 and ended.sink.ends == ["cancelled"]


def test_a_stream_ends_once_and_a_gone_client_cancels_only_its_stream(lm):
    stage, k = make_stage(lm), lm.num_codebooks
    gone, other = make_seq(lm, "gone", sink=ListSink(fails=True)), make_seq(lm, "other")
    run(stage, [gone, other], k, 2)
    assert gone.is_cancelled and not other.is_cancelled and len(other.sink.chunks) == 1
    stage.finish(gone, "cancelled")
    stage.finish(gone, "again")
    assert gone.sink.ends == ["cancelled"]


def test_an_inline_codec_sends_each_chunk_with_its_audio(lm):
    codec = SilenceCodec()
    stage, k = make_stage(lm, codec), lm.num_codebooks
    seq = make_seq(lm, "a", frames=5)
    run(stage, [seq], k, 5)
    assert [c.audio.shape[0] for c in seq.sink.chunks] == [8, 12]  # new frames x 4 samples
    assert len(codec.windows) == 2 and seq.sink.ends == [None]


def test_a_failed_inline_decode_ends_its_streams_and_sends_nothing(lm):
    stage, k = make_stage(lm, SilenceCodec(fails=True)), lm.num_codebooks
    seqs = [make_seq(lm, "a"), make_seq(lm, "b")]
    run(stage, seqs, k, 2)
    for seq in seqs:
        assert seq.sink.chunks == [] and seq.sink.ends == ["codec failed: out of memory"]


def test_a_cascades_chunks_are_refined_to_whole_frames_each_continuing_the_last(lm):
    codec, refiner = SilenceCodec(), CountingRefiner()
    stage, k = make_stage(CascadeLM(lm), codec, refiner), lm.num_codebooks
    seq = make_seq(lm, "a", frames=5)
    run(stage, [seq], k, 5, first_code=10)
    assert refiner.asked == [([10, 11], 0), ([10, 11, 12, 13, 14], 2)]  # the stream so far, the refined so far
    whole = codec.windows[-1]  # the last chunk's window: 2 frames of context and its 3 new ones
    assert whole.shape == (5, k + 2) and whole[:, 0].tolist() == [10, 11, 12, 13, 14]
    assert whole[:, k:].tolist() == [[c + 1, c + 2] for c in range(10, 15)]
