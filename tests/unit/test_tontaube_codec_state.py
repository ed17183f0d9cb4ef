"""TontaubeV1's stream state on the codec lane (codec.py, "Stream state"): VibeVoice's causal tails kept per stream,
so a chunk decodes DualCodec's short window and only its new frames (and the lag) through VibeVoice, against the
whole stream and today's windows; the lane's bookkeeping: freed at the stream's end and on cancellation, put back
when a decode fails, rebuilt from a window after a gap or a lane's reload; several streams in one call.

Measured on the tiny shapes (random weights; the streams of test_tontaube_codec.py): chunked with the state vs
whole, max 1.8e-5 (today's windows: 1.8e-5), vs today's windows 1.1e-5; the 10th chunk's window shrinks from
92 frames (62 of context) to 62 (32), its VibeVoice piece from 56 frames to 18.
"""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backend_python.engine.codec_runner import CodecRunner, decode_windowed
from backend_python.engine.codec_states import CodecStateLimits
from backend_python.models.codec_stream import StreamWindow
from backend_python.models.tontaube.codec import LEFT_CONTEXT_FRAMES, LOOKAHEAD_FRAMES, state_lag_frames
from backend_python.models.tontaube.dualcodec import (DualCodecConfig, DualCodecDecoder, lookahead_reach_frames,
                                                      tiny_config)
from backend_python.models.tontaube.vibevoice import HOP_LENGTH as VV_HOP
from tests.unit.test_tontaube_codec import (SPF, WINDOW_TOLERANCE, dualcodec_only, engine_chunks,  # noqa: F401
                                            errors, random_codes, streams, with_vibevoice)

torch.set_flush_denormal(True)
MAX_TOLERANCE, RMS_TOLERANCE = WINDOW_TOLERANCE[True]  # chunked vs whole: today's windows' tolerance
LAG_EXACT_ATOL = 1e-6  # DualCodec's audio of frames whose whole reach a window holds: rounding


def stateful(codec, **limits) -> CodecRunner:
    return CodecRunner(codec, stream_states=CodecStateLimits(**limits))


def decode_in_steps(runner: CodecRunner, per_stream: list[list]) -> list[torch.Tensor]:
    """Every stream's k-th chunk in the k-th call, all streams in one batch; each stream's audio."""
    audio = [[] for _ in per_stream]
    for step in range(max(len(chunks) for chunks in per_stream)):
        batch = [(s, chunks[step]) for s, chunks in enumerate(per_stream) if step < len(chunks)]
        for (s, _), piece in zip(batch, runner.decode_chunks([chunk for _, chunk in batch])):
            audio[s].append(piece)
    return [torch.cat(pieces) for pieces in audio]


def test_chunked_with_the_state_equals_the_whole_stream_and_today_s_windows(with_vibevoice, streams):
    codec = with_vibevoice
    per_stream = [engine_chunks(f"s{i}", codes, codec.shape.window) for i, codes in enumerate(streams)]
    runner = stateful(codec)
    cached = decode_in_steps(runner, per_stream)
    whole = [codec.decode(codes[None])[0] for codes in streams]
    windowed = [torch.cat(decode_windowed(codec, chunks)) for chunks in per_stream]
    assert [a.shape for a in cached] == [w.shape for w in whole]
    max_error, rms_error = errors(cached, whole)
    assert max_error <= MAX_TOLERANCE and rms_error <= RMS_TOLERANCE  # measured 1.8e-5
    assert errors(cached, windowed)[0] <= MAX_TOLERANCE  # measured 1.1e-5
    counters = runner.states.counters
    assert counters.num_misses == len(streams) and counters.num_hits == sum(len(c) - 1 for c in per_stream)
    assert runner.states.num_states == 0  # each stream's last chunk freed its state


def test_without_the_lag_the_state_would_carry_dualcodec_s_lookahead_error(with_vibevoice, streams, monkeypatch):
    """The state stays `state_lag_frames` behind a chunk's end: DualCodec's audio of a window's last new frames
    misses lookahead, and a state that holds it passes the error on to the next chunks (1.3e-3)."""
    monkeypatch.setattr(with_vibevoice, "state_lag_frames", 0)
    chunks = engine_chunks("s", streams[0], with_vibevoice.shape.window)
    cached = decode_in_steps(stateful(with_vibevoice), [chunks])
    assert errors(cached, [with_vibevoice.decode(streams[0][None])[0]])[0] > 5 * MAX_TOLERANCE


def test_dualcodec_s_lookahead_reach_is_its_autograd_receptive_field():
    """DAC's decoder, from a frame's last sample: the last latent frame it reads, at the tiny shape (autograd, any
    weights) and the official one (by the same probe: 27); the lag that follows at each."""
    config = tiny_config()
    decoder = DualCodecDecoder(config).double()
    latent = torch.randn(1, 1024, 30, dtype=torch.float64, requires_grad=True)
    audio = decoder.dac.decoder(latent)[0, 0]
    grad, = torch.autograd.grad(audio[11 * SPF - 1], latent)
    assert grad[0].abs().sum(0).nonzero().max().item() - 10 == lookahead_reach_frames(config) == 9
    assert lookahead_reach_frames(DualCodecConfig()) == 27
    assert state_lag_frames(config, VV_HOP) == 3 and state_lag_frames(DualCodecConfig(), VV_HOP) == 14


def test_dualcodec_s_audio_is_exact_before_the_lag(with_vibevoice, streams):
    """What the lag rests on: with 5 frames of lookahead, DualCodec's audio of a window's new frames is exact (to
    rounding) up to their last reach − 5 = 4 frames, which the lag's 3 VibeVoice frames cover, and off in the last
    ones; with its 27 frames of context before the lag's 5 (`state_context_frames`), from the lag's first frame on."""
    codec, codes = with_vibevoice, streams[1]
    whole = codec.dualcodec_audio(codes[None])[0]
    lag_frames = codec.state_context_frames - LEFT_CONTEXT_FRAMES
    inexact = lookahead_reach_frames(codec.dualcodec.config) - LOOKAHEAD_FRAMES
    assert inexact * SPF <= codec.state_lag_samples <= lag_frames * SPF and lag_frames == 5
    checked = 0
    for chunk in engine_chunks("s", codes, codec.shape.window):
        if chunk.lookahead_frames < LOOKAHEAD_FRAMES or chunk.context_frames < codec.state_context_frames:
            continue
        window = chunk.codes[chunk.context_frames - codec.state_context_frames:]
        span = (lag_frames + chunk.num_new) * SPF
        audio = codec.dualcodec_audio(window[None])[0][LEFT_CONTEXT_FRAMES * SPF:][:span]
        first = (chunk.start_frame - lag_frames) * SPF
        error = (audio - whole[first:first + span]).abs()
        assert error[:-inexact * SPF].max() <= LAG_EXACT_ATOL, chunk.start_frame
        assert error[-2 * SPF:].max() > 100 * LAG_EXACT_ATOL, chunk.start_frame  # measured >= 3.6e-4
        checked += 1
    assert checked >= 4


def test_a_continued_chunk_decodes_the_short_window(with_vibevoice, streams):
    """In the steady state a chunk decodes `state_context_frames` + 25 + 5 frames, not the full window."""
    codec = with_vibevoice
    assert codec.state_context_frames == LEFT_CONTEXT_FRAMES + 5 < codec.left_context_frames == 62
    runner = stateful(codec)
    chunks = engine_chunks("s", streams[1], codec.shape.window)
    for chunk in chunks[:5]:
        runner.decode_chunks([chunk])
    runner.frames.num_decoded = runner.frames.num_new = 0
    runner.decode_chunks([chunks[5]])
    assert chunks[5].num_new == 25 and chunks[5].codes.shape[0] == 62 + 25 + 5
    assert runner.frames.num_decoded == codec.state_context_frames + 25 + LOOKAHEAD_FRAMES


def test_several_streams_continue_in_one_dualcodec_and_one_vibevoice_batch(with_vibevoice, monkeypatch):
    codec = with_vibevoice
    per_stream = [engine_chunks(f"s{i}", random_codes(150, 20 + i), codec.shape.window) for i in range(3)]
    runner = stateful(codec)
    for step in range(5):
        runner.decode_chunks([chunks[step] for chunks in per_stream])
    calls = {"dualcodec": 0, "vibevoice": 0}
    dualcodec_audio, resynth_stream = codec.dualcodec_audio, codec.resynth.resynth_stream

    def count(name, fn):
        def counted(*args):
            calls[name] += 1
            return fn(*args)
        return counted
    monkeypatch.setattr(codec, "dualcodec_audio", count("dualcodec", dualcodec_audio))
    monkeypatch.setattr(codec.resynth, "resynth_stream", count("vibevoice", resynth_stream))
    runner.decode_chunks([chunks[5] for chunks in per_stream])
    assert calls == {"dualcodec": 1, "vibevoice": 2}  # the pieces to the state, then the lag: each one batch
    assert runner.states.counters.num_hits == 3 * 5


def test_the_state_is_freed_at_the_stream_s_end_and_on_cancellation(with_vibevoice, streams):
    codec = with_vibevoice
    runner = stateful(codec)
    a, b = (engine_chunks(sid, codes, codec.shape.window) for sid, codes in zip("ab", streams))
    runner.decode_chunks([a[0], b[0]])
    assert runner.states.num_states == 2
    assert runner.states.num_bytes == 2 * codec.new_stream_state().num_bytes
    assert runner.release_stream("a") and not runner.release_stream("a")  # the stream was cancelled
    assert "a" not in runner.states and "b" in runner.states
    for chunk in b[1:]:
        runner.decode_chunks([chunk])
    assert runner.states.num_states == 0 and runner.states.num_bytes == 0 and runner.states.counters.num_freed == 1


def test_a_failed_decode_puts_the_states_back_and_the_streams_continue(with_vibevoice, streams, monkeypatch):
    """A decode that raises (the lane answers those chunks with an error, and retries each alone) loses no
    stream's state: the next chunks continue from them and equal the whole streams."""
    codec = with_vibevoice
    per_stream = [engine_chunks(f"s{i}", codes, codec.shape.window) for i, codes in enumerate(streams)]
    runner = stateful(codec)
    first = runner.decode_chunks([chunks[0] for chunks in per_stream])
    failing = codec.dualcodec_audio
    monkeypatch.setattr(codec, "dualcodec_audio", lambda codes: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        runner.decode_chunks([chunks[1] for chunks in per_stream])
    monkeypatch.setattr(codec, "dualcodec_audio", failing)
    assert runner.states.num_states == 2
    rest = decode_in_steps(runner, [chunks[1:] for chunks in per_stream])
    assert runner.states.counters.num_hits == 2 + sum(len(c) - 1 for c in per_stream)  # the failed call's 2 too
    audio = [torch.cat((head, tail)) for head, tail in zip(first, rest)]
    assert errors(audio, [codec.decode(codes[None])[0] for codes in streams])[0] <= MAX_TOLERANCE


def test_a_reloaded_lane_rebuilds_from_the_window_and_goes_on(with_vibevoice, streams):
    """A lane that died took its states with it; its successor (a fresh runner) finds none: the stream's next chunk
    decodes its full window from a fresh state (today's audio), leaves a state, and the stream continues."""
    codec = with_vibevoice
    chunks = engine_chunks("s", streams[1], codec.shape.window)
    before = stateful(codec)
    head = [before.decode_chunks([chunk])[0] for chunk in chunks[:4]]
    after = stateful(codec)  # the reloaded lane
    tail = [after.decode_chunks([chunk])[0] for chunk in chunks[4:]]
    (windowed,) = decode_windowed(codec, [chunks[4]])
    assert (tail[0] - windowed).abs().max() <= MAX_TOLERANCE
    assert (after.states.counters.num_misses, after.states.counters.num_hits) == (1, len(chunks) - 5)
    assert errors([torch.cat(head + tail)], [codec.decode(streams[1][None])[0]])[0] <= MAX_TOLERANCE


def test_a_gap_rebuilds_and_two_chunks_of_one_stream_in_one_batch(with_vibevoice, streams):
    """A chunk that went to the other lane leaves this lane's state behind (a gap: rebuilt from the next chunk's
    window); two chunks of a stream in one call: the second decodes its window, and its state is the one kept."""
    codec = with_vibevoice
    chunks = engine_chunks("s", streams[1], codec.shape.window)
    runner = stateful(codec)
    whole = codec.decode(streams[1][None])[0]
    for chunk in chunks[:3]:
        runner.decode_chunks([chunk])
    together = runner.decode_chunks([chunks[4], chunks[5]])  # chunk 3 went to the urgent lane
    assert runner.states.counters.num_gaps == 1
    rest = [runner.decode_chunks([chunk])[0] for chunk in chunks[6:]]
    audio = torch.cat(together + rest)
    start = chunks[4].start_frame * SPF
    assert (audio - whole[start:]).abs().max() <= MAX_TOLERANCE
    assert runner.states.counters.num_hits == 2 + len(chunks) - 6


def test_an_off_grid_chunk_keeps_no_state(with_vibevoice, streams):
    """A chunk whose end is not a VibeVoice frame boundary (a segment's chunk plan) gets today's audio and leaves
    no state; nor does a chunk short of its lookahead."""
    codec = with_vibevoice
    codes = streams[1]
    window = StreamWindow(codes[:7 + LOOKAHEAD_FRAMES], 0, LOOKAHEAD_FRAMES, 0, is_last=False)
    (audio,), (state,) = codec.decode_stream_windows([None], [window])
    (windowed,) = codec.decode_windows([(window.codes, 0)], start_frames=[0])
    assert state is None and (audio - windowed[:7 * SPF]).abs().max() <= MAX_TOLERANCE
    short = StreamWindow(codes[:5 + 2], 0, 2, 0, is_last=False)
    assert codec.decode_stream_windows([None], [short])[1] == [None]
    on_grid = replace(window, codes=codes[:5 + LOOKAHEAD_FRAMES])
    assert codec.decode_stream_windows([None], [on_grid])[1][0] is not None


def test_dualcodec_alone_keeps_no_state(dualcodec_only):
    assert not dualcodec_only.supports_streaming_state
    assert stateful(dualcodec_only).states is None
