"""ChunkPlan: a small first chunk, fixed later chunks, a short final chunk."""
import pytest

from scheduler import SchedulerConfig
from scheduler import ChunkingConfig, ChunkPlan, ChunkSpan


@pytest.fixture
def plan():
    return ChunkPlan(ChunkingConfig(first_chunk_frames=2, chunk_frames=5, chunk_growth=None))


def test_nothing_before_first_chunk_is_complete(plan):
    assert plan.ready_chunks(num_frames=1, num_chunks_emitted=0, is_finished=False) == []


def test_first_chunk_is_smaller(plan):
    assert plan.ready_chunks(2, 0, False) == [ChunkSpan(0, 0, 2)]
    assert plan.ready_chunks(6, 1, False) == []
    assert plan.ready_chunks(7, 1, False) == [ChunkSpan(1, 2, 7)]


def test_several_complete_chunks_at_once(plan):
    spans = plan.ready_chunks(13, 0, False)
    assert [(s.index, s.start, s.end) for s in spans] == [(0, 0, 2), (1, 2, 7), (2, 7, 12)]
    assert [s.num_frames for s in spans] == [2, 5, 5]


def test_short_last_chunk_when_finished(plan):
    assert plan.ready_chunks(10, 2, True) == [ChunkSpan(2, 7, 10, is_last=True)]


def test_finished_on_boundary_marks_last_complete_chunk(plan):
    assert plan.ready_chunks(7, 1, True) == [ChunkSpan(1, 2, 7, is_last=True)]
    assert plan.ready_chunks(7, 2, True) == []  # already emitted: no empty chunk


def test_request_shorter_than_first_chunk(plan):
    assert plan.ready_chunks(1, 0, True) == [ChunkSpan(0, 0, 1, is_last=True)]
    assert plan.ready_chunks(0, 0, True) == []


def test_inconsistent_counts_raise(plan):
    with pytest.raises(ValueError):
        plan.ready_chunks(3, 2, False)  # chunk 1 needs frames up to 7
    with pytest.raises(ValueError):
        plan.ready_chunks(-1, 0, False)


@pytest.mark.parametrize("kwargs", [{"first_chunk_frames": 0}, {"chunk_frames": 0}, {"chunk_frames": 2.5}])
def test_chunking_config_validation(kwargs):
    with pytest.raises(ValueError):
        ChunkingConfig(**kwargs)


def test_growing_chunks_ramp_up_to_the_full_size():
    config = ChunkingConfig(first_chunk_frames=2, chunk_frames=10, chunk_growth=2.0)
    plan = ChunkPlan(config)
    assert [config.size(i) for i in range(6)] == [2, 4, 8, 10, 10, 10]
    assert [plan.start(i) for i in range(7)] == [0, 2, 6, 14, 24, 34, 44]
    spans = plan.ready_chunks(num_frames=17, num_chunks_emitted=0, is_finished=True)
    assert [(s.start, s.end) for s in spans] == [(0, 2), (2, 6), (6, 14), (14, 17)]
    assert spans[-1].is_last


def test_growth_that_overshoots_jumps_straight_to_the_full_size():
    plan = ChunkPlan(ChunkingConfig(first_chunk_frames=4, chunk_frames=10, chunk_growth=3.0))
    assert [plan.start(i) for i in range(4)] == [0, 4, 14, 24]


@pytest.mark.parametrize("growth", [1.0, 0.5, -2.0])
def test_growth_must_grow(growth):
    with pytest.raises(ValueError, match="chunk_growth"):
        ChunkingConfig(chunk_growth=growth)


def test_growth_from_triton_parameters():
    config = SchedulerConfig.from_dict({"first_chunk_frames": "2", "chunk_frames": "10", "chunk_growth": "2"})
    assert config.chunking.chunk_growth == 2.0
