"""Streaming codec decode (Qwen3-TTS 12 Hz, tiny preset): carried state equals a full-utterance decode,
mixed batches equal single rows, a fresh state over a window equals the windowed decode (CPU, fp32);
bf16 on CUDA stays near fp32 on CPU."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backend_python.models.codec_stream import POSITION, StreamCarry, split_states, stack_states
from backend_python.models.qwen3_tts.codec import Qwen3TTSCodec
from backend_python.models.qwen3_tts.codec_config import FIXTURE_SHAPE, tiny_codec_config
from scheduler.chunking import ChunkingConfig, ChunkPlan

torch.set_flush_denormal(True)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# fp32, CPU: a stream of 400 frames in the engine's ramp against one full decode; measured max errors
# 1.5e-6, 2.1e-6, 2.2e-6 for seeds 3, 4, 5 (other conv/GEMM shapes, the same arithmetic). A missing
# tail or a wrong attention cache shows up as errors of order 1e-2 and more.
STREAM_ATOL = 4e-6
BATCH_ATOL = 2e-6  # a row in a mixed batch vs the same row alone: measured < 1e-6
STATE_RTOL = 1e-5  # inner activations are larger than the audio: measured relative 3e-6
SPF = 1920
ENGINE_RAMP = ChunkingConfig(first_chunk_frames=2, chunk_frames=10, chunk_growth=2)  # the serving default


# the fixtures' tiny shape (16 codebooks), on which the bounds above were measured
CODEC_CONFIG = tiny_codec_config(**FIXTURE_SHAPE)


@pytest.fixture(scope="module")
def codec() -> Qwen3TTSCodec:
    return Qwen3TTSCodec.from_config(CODEC_CONFIG, seed=3)


def random_codes(num_frames: int, seed: int) -> torch.Tensor:
    """[T, K] int64 codes of `CODEC_CONFIG`."""
    return torch.randint(0, 64, (num_frames, CODEC_CONFIG.num_quantizers), generator=torch.Generator().manual_seed(seed))


def ramp_bounds(num_frames: int) -> list[tuple[int, int]]:
    """The engine's chunks (2, 4, 8, 10, 10, ... frames) of a `num_frames`-frame utterance."""
    spans = ChunkPlan(ENGINE_RAMP).ready_chunks(num_frames, 0, is_finished=True)
    return [(span.start, span.end) for span in spans]


def stream_decode(codec: Qwen3TTSCodec, codes: torch.Tensor) -> torch.Tensor:
    """codes [T, K] chunk by chunk through one carried state -> audio [T * spf]."""
    state, pieces = codec.new_stream_state(), []
    for start, end in ramp_bounds(codes.shape[0]):
        (audio,), (state,) = codec.decode_stream([state], [codes[start:end]])
        pieces.append(audio)
    return torch.cat(pieces)


def test_the_engine_ramp_is_what_the_tests_split_in():
    assert [end - start for start, end in ramp_bounds(50)] == [2, 4, 8, 10, 10, 10, 6]


def test_chunked_stateful_decode_equals_the_full_decode(codec):
    # 400 frames: far past the attention window (72) and the windowed decode's receptive field (142)
    codes = random_codes(400, seed=3)
    full = codec.decode(codes[None])[0]
    streamed = stream_decode(codec, codes)
    assert streamed.shape == full.shape == (400 * SPF,)
    torch.testing.assert_close(streamed, full, atol=STREAM_ATOL, rtol=0)


def test_the_windowed_decode_it_replaces_is_not_exact(codec):
    # the reason for the state: 25 frames of context miss most of the receptive field
    codes = random_codes(160, seed=3)
    full = codec.decode(codes[None])[0]
    (window,) = codec.decode_windows([(codes[100:135], 25)])
    assert (window - full[125 * SPF: 135 * SPF]).abs().max() > 100 * STREAM_ATOL


def test_a_mixed_batch_equals_each_row_alone(codec):
    # rows at positions 0, 13, 90 and 150, bringing 2, 10, 7 and 4 new frames
    codes = random_codes(200, seed=4)
    starts, lengths = [0, 13, 90, 150], [2, 10, 7, 4]
    states = [advanced_state(codec, codes[:start]) for start in starts]
    rows = [codes[s: s + n] for s, n in zip(starts, lengths)]
    batched, batched_states = codec.decode_stream(states, rows)
    for state, row, audio, new_state in zip(states, rows, batched, batched_states):
        (alone,), (alone_state,) = codec.decode_stream([state], [row])
        assert audio.shape == alone.shape == (row.shape[0] * SPF,)
        torch.testing.assert_close(audio, alone, atol=BATCH_ATOL, rtol=0)
        for key, tensor in alone_state.tensors.items():
            torch.testing.assert_close(new_state.tensors[key], tensor, atol=BATCH_ATOL, rtol=STATE_RTOL)


def advanced_state(codec: Qwen3TTSCodec, codes: torch.Tensor):
    """The state after decoding `codes` [T, K] in one call (a fresh state when T is 0)."""
    state = codec.new_stream_state()
    if codes.shape[0]:
        _, (state,) = codec.decode_stream([state], [codes])
    return state


def test_padded_rows_leave_the_same_state_as_unpadded_ones(codec):
    # a short row next to a long one is right-padded; the padding must not enter its state
    codes = random_codes(60, seed=5)
    short, long = codec.decode_stream([codec.new_stream_state()] * 2, [codes[:3], codes[:40]])[1]
    (next_audio,), _ = codec.decode_stream([short], [codes[3:13]])
    full = codec.decode(codes[None, :13])[0]
    torch.testing.assert_close(next_audio, full[3 * SPF:], atol=STREAM_ATOL, rtol=0)
    assert short.tensors[POSITION].item() == 3 and long.tensors[POSITION].item() == 40


def test_the_gathered_tails_of_the_graph_path_equal_the_sliced_ones(codec):
    # inside CUDA graphs row lengths are data, so every tail is cut by a gather (is_ragged): same result
    codes = random_codes(30, seed=5)
    states = [advanced_state(codec, codes[:n]) for n in (0, 12)]
    rows = [codes[:10], codes[12:22]]
    sliced, sliced_states = codec.decode_stream(states, rows)
    carry = StreamCarry(stack_states(states), torch.tensor([10, 10]), 10, is_ragged=True)
    gathered = codec.decode_with_carry(codec.pad_windows([(r, 0) for r in rows]), carry)
    assert torch.equal(gathered, torch.stack(sliced))
    for row, state in enumerate(sliced_states):
        assert all(torch.equal(carry.new_state[k][row: row + 1], v) for k, v in state.tensors.items())


def test_states_keep_fixed_shapes_and_inputs_stay_untouched(codec):
    fresh = codec.new_stream_state()
    codes = random_codes(90, seed=6)
    _, (after,) = codec.decode_stream([fresh], [codes])
    assert {k: (v.shape, v.dtype) for k, v in after.tensors.items()} == \
        {k: (v.shape, v.dtype) for k, v in fresh.tensors.items()}
    assert all(not v.any() for v in fresh.tensors.values())  # decode_stream did not write into its input
    first, _ = codec.decode_stream([after], [codes[:5]])
    again, _ = codec.decode_stream([after], [codes[:5]])
    assert torch.equal(first[0], again[0])


def test_a_fresh_state_over_a_window_equals_the_windowed_decode(codec):
    # the lane's fallback: decode the whole window statefully, keep the samples after the context
    codes = random_codes(35, seed=7)
    (windowed,) = codec.decode_windows([(codes, 25)])
    (audio,), _ = codec.decode_stream([codec.new_stream_state()], [codes])
    torch.testing.assert_close(audio[25 * SPF:], windowed, atol=STREAM_ATOL, rtol=0)


def test_decode_stream_refuses_mismatched_rows(codec):
    with pytest.raises(ValueError, match="one state per row"):
        codec.decode_stream([codec.new_stream_state()], [random_codes(2, 0)] * 2)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_stateful_decode_on_cuda_matches_fp32_on_cpu(codec, dtype):
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        cuda = Qwen3TTSCodec.from_config(CODEC_CONFIG, device="cuda", dtype=dtype, seed=3)
        codes = random_codes(200, seed=3)
        streamed = stream_decode(cuda, codes.cuda()).cpu()
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    full = codec.decode(codes[None])[0]
    error = (streamed - full).abs()
    if dtype == torch.float32:  # other kernels, the same arithmetic (as the graph tests' CUDA_ATOL)
        assert error.max() < 1e-4
    else:  # bf16 on CPU against fp32 measured mean 2.6e-3, max 3.4e-2 (the full decode alike)
        assert error.mean() < 1e-2 and error.max() < 0.1


def test_split_states_gives_each_row_its_own_copy_in_one_copy_per_dtype():
    """The inverse of stack_states, exactly; a row shares storage with neither the batch nor another row; and the
    copies are one per row and dtype, not one per tensor (a background call of 32 rows over the 12 Hz decoder's 38
    tensors made 1,216)."""
    generator = torch.Generator().manual_seed(0)
    batched = {f"layer{i}": torch.randn(4, 3, i + 2, generator=generator).to(torch.bfloat16) for i in range(12)}
    batched[POSITION] = torch.arange(4, dtype=torch.int64) * 10
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        states = split_states(batched, 3)
    copies = [e for e in prof.events() if e.name in ("aten::cat", "aten::clone", "aten::copy_")]
    assert len(copies) == 3 * 2  # rows x dtypes
    for row, state in enumerate(states):
        assert list(state.tensors) == list(batched)
        for key, value in batched.items():
            got = state.tensors[key]
            assert got.shape == (1, *value.shape[1:]) and got.dtype == value.dtype
            assert torch.equal(got, value[row: row + 1])
        storages = {t.untyped_storage().data_ptr() for t in state.tensors.values()}
        assert not storages & {v.untyped_storage().data_ptr() for v in batched.values()}
        for other in states[:row]:
            assert not storages & {t.untyped_storage().data_ptr() for t in other.tensors.values()}
    assert torch.equal(stack_states(states)[POSITION], batched[POSITION][:3])


@pytest.mark.parametrize("lengths", [(3, 3), (2, 4)], ids=["equal", "ragged"])
def test_the_graph_inputs_fill_holds_each_rows_codes_and_state_and_zero_padding(codec, lengths):
    """`CodecStreamGraphs._fill` (its graphs need CUDA; the fill is plain tensor code, checked here on the CPU's
    buffers): real rows get their codes, frame counts and states; padding rows and frames get zeros, whatever the
    buffers held before."""
    from backend_python.models.graphs.codec_stream import CodecStreamGraphs
    graphs = CodecStreamGraphs.__new__(CodecStreamGraphs)  # no graphs captured: only the static buffers
    graphs.codec, (rows, frames) = codec, (4, 4)
    graphs.codes = torch.full((rows, frames, codec.num_codebooks), 7, dtype=torch.long)
    graphs.num_new = torch.full((rows,), 9, dtype=torch.long)
    graphs.state = {k: torch.full_like(v.expand(rows, *v.shape[1:]), 5) for k, v in
                    codec.new_stream_state().tensors.items()}
    codes = [random_codes(n, seed=n) for n in lengths]
    states = [advanced_state(codec, random_codes(5, seed=10 + row)) for row in range(len(lengths))]
    graphs._fill((rows, frames), states, codes)
    for row, row_codes in enumerate(codes):
        assert torch.equal(graphs.codes[row, : row_codes.shape[0]], row_codes)
        assert not graphs.codes[row, row_codes.shape[0]:].any()
        for key, static in graphs.state.items():
            assert torch.equal(static[row: row + 1], states[row].tensors[key])
    assert not graphs.codes[len(codes):].any()
    assert graphs.num_new.tolist() == [*lengths] + [frames] * (rows - len(lengths))
    assert all(not static[len(states):].any() for static in graphs.state.values())


@pytest.mark.parametrize("kernel, dilation, groups", [(7, 1, 1), (7, 3, 2), (7, 9, 1), (3, 1, 4), (7, 1, 8)])
@pytest.mark.parametrize("lengths", [(40, 40), (40, 1), (40, 25)], ids=["equal", "one_frame", "ragged"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
def test_the_padded_streaming_conv_equals_the_conv_over_tail_and_input(kernel, dilation, groups, lengths, with_bias):
    """`CausalConv1d._stream_padded` (x padded by the convolution, the outputs that read the tail recomputed) against
    the conv over [tail, x] it replaces, float64: every row's real outputs, and its new tail exactly, for dilated and
    grouped convs and rows whose real input is shorter than the tail; with the conv's bias and without it (a fused
    residual unit's activation adds it)."""
    from backend_python.models.qwen3_tts.codec_layers import PADDED_STREAM_MIN_RATIO, CausalConv1d
    torch.manual_seed(0)
    conv = CausalConv1d(8, 8, kernel, dilation=dilation, groups=groups).double()
    conv.stream_key = "conv"
    scale, num_frames = 40, max(lengths)  # samples per frame at this layer, frames in the call
    x = torch.randn(len(lengths), 8, num_frames * scale, dtype=torch.float64)
    assert x.shape[-1] >= PADDED_STREAM_MIN_RATIO * conv.left_pad  # the padded path runs
    state = {POSITION: torch.zeros(len(lengths), dtype=torch.long),
             "conv": torch.randn(len(lengths), 8, conv.left_pad, dtype=torch.float64)}

    def carry() -> StreamCarry:
        return StreamCarry(dict(state), torch.tensor(lengths), num_frames, is_ragged=min(lengths) != max(lengths))

    expected_carry, padded_carry = carry(), carry()
    bias = conv.conv.bias if with_bias else None
    expected = F.conv1d(expected_carry.extend("conv", x), conv.conv.weight, bias, dilation=dilation, groups=groups)
    got = conv._stream_padded(x, padded_carry, bias)
    for row, frames in enumerate(lengths):
        real = frames * scale
        torch.testing.assert_close(got[row, :, :real], expected[row, :, :real], atol=1e-12, rtol=0)
    assert torch.equal(padded_carry.new_state["conv"], expected_carry.new_state["conv"])


def test_the_graph_inputs_fill_refuses_a_state_that_does_not_fit(codec):
    """A state of another shape (another codec's, say) would leave the static input as it was and the graph would
    replay stale state: the fill says so instead."""
    from backend_python.models.graphs.codec_stream import CodecStreamGraphs
    graphs = CodecStreamGraphs.__new__(CodecStreamGraphs)
    graphs.codec = codec
    graphs.codes = torch.zeros(2, 4, codec.num_codebooks, dtype=torch.long)
    graphs.num_new = torch.ones(2, dtype=torch.long)
    fresh = codec.new_stream_state().tensors
    graphs.state = {k: torch.zeros_like(v.expand(2, *v.shape[1:])) for k, v in fresh.items()}
    key = next(k for k, v in fresh.items() if v.dim() == 3)
    wrong = codec.new_stream_state()
    wrong.tensors[key] = torch.zeros(1, fresh[key].shape[1], fresh[key].shape[2] + 1, dtype=fresh[key].dtype)
    with pytest.warns(UserWarning), pytest.raises(ValueError, match=key):
        graphs._fill((2, 4), [wrong], [random_codes(2, seed=0)])
