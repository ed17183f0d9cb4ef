"""ChunkPlan: a small first chunk, fixed later chunks, a short final chunk."""
import pytest

from scheduler import SchedulerConfig
from protocol.chunks import ChunkSizes
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


def test_a_stream_s_plan_follows_the_measured_step():
    """Qwen3-TTS on an H200: 80 ms frames, the next chunk 2 frames after a 1-frame first chunk, the codec's 20 ms:
    with a margin of 2 the one-frame first chunk has room while a step takes at most 10 ms."""
    config = ChunkingConfig(first_chunk_frames_idle=1, busy_streams=64)
    assert config.for_stream(10, step_s=0.009, frame_s=0.08).first_chunk_frames == 1
    assert config.for_stream(10, step_s=0.010, frame_s=0.08).first_chunk_frames == 1  # 80 ms = 2 x (20 + 20 ms)
    assert config.for_stream(10, step_s=0.0101, frame_s=0.08).first_chunk_frames == 2
    assert config.for_stream(10, step_s=0.0, frame_s=0.08).first_chunk_frames == 2  # no step measured yet
    assert config.for_stream(0, step_s=0.5, frame_s=0.08).first_chunk_frames == 1  # alone: always
    assert ChunkingConfig(first_chunk_frames_idle=1, first_chunk_room=0).for_stream(3, 0.001, 0.08).first_chunk_frames == 2
    busy = ChunkingConfig(first_chunk_frames_idle=1, first_chunk_frames_busy=4, chunk_frames_busy=20, busy_streams=16)
    plan = busy.for_stream(16, step_s=0.001, frame_s=0.08)
    assert (plan.first_chunk_frames, plan.chunk_frames) == (4, 20)  # the coarser plan wins past the threshold
    assert busy.for_stream(15, step_s=0.001, frame_s=0.08).chunk_frames == busy.chunk_frames
    assert ChunkPlan(plan).ready_chunks(40, 0, False)[-1].num_frames == 16  # 4, 8, 16, then 20s
    with pytest.raises(ValueError):
        ChunkingConfig(first_chunk_room=-1.0)
    with pytest.raises(ValueError):
        ChunkingConfig(chunk_frames_busy=0)


# ---- the sizes a client reads (protocol.chunks) --------------------------------------------------------

@pytest.mark.parametrize("chunking", [ChunkingConfig(), ChunkingConfig(first_chunk_frames=3, chunk_frames=12,
                                                                       chunk_growth=None),
                                      ChunkingConfig(first_chunk_frames=1, chunk_frames=25, chunk_growth=1.5)])
def test_a_client_reads_the_sizes_the_server_renders(chunking):
    """The bench places chunks from the LM's config parameters: what `voxlane serve` writes reads back as the
    same sizes, and so the same boundaries, as the LM lane's own plan."""
    params = SchedulerConfig(chunking=chunking).to_parameters()
    sizes = ChunkSizes.from_parameters({key: {"string_value": value} for key, value in params.items()})
    assert sizes == chunking.sizes
    assert [ChunkPlan(sizes).start(i) for i in range(8)] == [ChunkPlan(chunking).start(i) for i in range(8)]


def test_chunk_sizes_check_their_values():
    with pytest.raises(ValueError, match="chunk_growth"):
        ChunkSizes.from_parameters({"chunk_growth": "1"})
    with pytest.raises(ValueError, match="first_chunk_frames"):
        ChunkingConfig(first_chunk_frames=0)
    assert ChunkSizes.from_parameters({"chunk_growth": "None", "mode": "voxlane"}) == ChunkSizes(chunk_growth=None)
