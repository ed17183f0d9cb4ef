"""`voxlane bench --audio-in-rate` (clients/bench/audio_pace.py, records.py): which input a chunk of output needs,
each chunk's algorithmic latency, and stalls split into the input's and the server's."""
from __future__ import annotations

import math

import pytest

from clients.bench.audio_pace import (audio_offsets, audio_pieces, input_audio, input_sent_by, piece_frames)
from clients.bench.config import BenchConfig
from clients.bench.records import Chunk, RequestRecord, Slo, evaluate
from scheduler import ChunkingConfig

CHUNKING = ChunkingConfig(first_chunk_frames=2, chunk_frames=4, chunk_growth=None)


def test_pieces_are_80_ms_of_the_seeded_input_and_go_out_at_the_rate():
    audio = input_audio(1.0, seed=3)
    pieces = audio_pieces(audio)
    assert len(pieces) == 13 and all(p.size == 1920 for p in pieces[:-1]) and pieces[-1].size == 960
    assert piece_frames(audio.size)[:3] == [1.0, 2.0, 3.0] and piece_frames(audio.size)[-1] == 12.5
    assert len(piece_frames(audio.size)) == len(pieces)
    assert audio_offsets(3, 1.0) == [0.0, 0.08, 0.16] and audio_offsets(3, 2.0) == [0.0, 0.04, 0.08]
    assert (input_audio(1.0, seed=3) == audio).all() and not (input_audio(1.0, seed=4) == audio).all()


def test_a_chunk_needs_its_input_rounded_up_to_a_whole_input_chunk_and_the_last_needs_the_close():
    sent = [0.1 * k for k in range(1, 14)]  # piece k (1 frame each) out at 0.1 k s
    frames = [float(k) for k in range(1, 13)] + [12.5]
    assert input_sent_by(sent, frames, 2.0, end_frame=2) == pytest.approx(0.4)  # frames 0..3: the fourth piece
    assert input_sent_by(sent, frames, 2.0, end_frame=5) == pytest.approx(0.8)
    assert input_sent_by(sent, frames, 2.0, end_frame=12) == pytest.approx(1.2)
    assert input_sent_by(sent, frames, 2.0, end_frame=13) == 2.0  # the shorter last chunk: read at the close
    assert input_sent_by(sent, frames, None, end_frame=13) == math.inf


def test_an_audio_in_record_s_latency_and_its_input_stalls():
    sent = [0.0] + [0.08 * k for k in range(1, 11)]  # the first request, then 10 pieces of 1 frame each
    frames = [0.0] + [float(k) for k in range(1, 11)]
    # chunks of 2, 4, 4 frames: they answer input frames 0..3, 0..7, and 8..9 (read at the close, 1.0 s)
    chunks = (Chunk(0, 0.40, 0.16, "urgent"), Chunk(1, 0.75, 0.32, "background"),
              Chunk(2, 1.50, 0.32, "background"))
    record = RequestRecord("r", "u", 0.0, 0.0, 1.0, chunks, 1.6, None, piece_sent_s=tuple(sent), text_closed_s=1.0,
                           piece_frames=tuple(frames))
    outcome = evaluate(record, Slo(ttfa_s=0.2, chunking=CHUNKING))
    assert record.is_audio_in and record.is_text_stream
    assert outcome.algorithmic_latency_s == pytest.approx((0.40 - 0.32, 0.75 - 0.64, 1.50 - 1.0))
    assert outcome.server_ttfa_s == pytest.approx(0.08)
    # chunk 1 was due at 0.56 and its input went out at 0.64: the input's stall; chunk 2 was due at 1.07 and
    # its input was all in at 1.0: the server's
    assert outcome.stalled_chunks == (1, 2) and outcome.text_stalled_chunks == (1,) and outcome.num_server_stalls == 1
    assert not outcome.meets_slo
    assert RequestRecord.from_json(record.to_json()) == record


def test_the_flag_needs_grpc_and_no_text_rate():
    assert BenchConfig(audio_in_rate=1.0).is_session
    for bad in (dict(audio_in_rate=0.0), dict(audio_in_rate=1.0, protocol="openai"),
                dict(audio_in_rate=1.0, text_rate=10.0)):
        with pytest.raises(ValueError, match="audio-in-rate"):
            BenchConfig(**bad)
