"""`voxlane bench --text-rate`: pieces, their send schedule, and stalls split into the text's and the server's.

The attribution cases use the default chunk sizes (2, 4, 8, 10, … frames: chunk 0 is frames [0, 2),
chunk 1 [2, 6), chunk 2 [6, 14)), so chunk i needs pieces 0..end(i)+1: pieces 3, 7 and 15.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
from dataclasses import replace

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from clients.bench.cli import add_bench_flags, bench_config
from clients.bench.config import BenchConfig
from clients.bench.loadgen import PlannedRequest, request_schedule, run_load
from clients.bench.plot import _label
from clients.bench.records import Chunk, RequestRecord, Slo, evaluate
from clients.bench.server_info import chunking_of
from clients.bench.summary import RunWindow, summarize_rate
from clients.bench.text_pace import cut_pieces, piece_offsets, text_sent_by
from clients.bench.workload import Utterance, synthetic_workload
from protocol.chunks import ChunkSizes
from protocol.reasons import Ended, EndReason
from protocol.wire import encode_error
from tests.unit.test_bench_loadgen import _response

FRAME_S = 0.08  # one 12.5 Hz frame
SLO = Slo(0.2)


# ---- pieces ------------------------------------------------------------------------------------------

def test_pieces_are_pre_tokens():
    assert cut_pieces("Hello, world! It's 42 o'clock.") == [
        "Hello", ",", " world", "!", " It", "'s", " 42", " o", "'", "clock", "."]
    assert cut_pieces("two  spaces\nand_under") == ["two", " ", " spaces", "\n", "and", "_", "under"]
    assert cut_pieces("") == []


@pytest.mark.parametrize("text", [
    "He hoped there would be stew for dinner, turnips and carrots and bruised potatoes.",
    "  leading and trailing  ", "Ünïcödé — “quotes” … 日本語のテキスト ½ ² e\u0301", "tabs\tand\r\nnewlines\n\n",
    "we'll they've I'd 'tis", "3.14159 + 2_000 = $5", "!!!???...",
])
def test_pieces_join_back_to_the_text(text):
    pieces = cut_pieces(text)
    assert "".join(pieces) == text and all(pieces)


def test_random_texts_join_back():
    rng = random.Random(0)
    alphabet = [chr(c) for c in (*range(0x20, 0x7f), *range(0xa0, 0x250), *range(0x300, 0x370),
                                 *range(0x3040, 0x30ff), 0x2014, 0x2026, 0x00bd, 0x2003, 0x3000, 0x0a, 0x09, 0x1f600)]
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert "".join(cut_pieces(text)) == text


def test_the_workload_cuts_to_about_one_piece_per_word_and_mark():
    utterance = synthetic_workload(size=1)[0]
    assert len(cut_pieces(utterance.text)) == len(utterance.text.split()) + 1  # the words and the final "."


# ---- the send schedule -------------------------------------------------------------------------------

def _planned(text: str = "Get the trust fund to the bank early.") -> PlannedRequest:
    return PlannedRequest("r1-s0-00003", Utterance("u", 2.0, text), 0.5, 2.0, 7)


def _inputs(request) -> dict[str, bytes]:
    return {tensor.name: raw for tensor, raw in zip(request.inputs, request.raw_input_contents)}


def _sequence(request) -> tuple[int, bool, bool]:
    params = request.parameters
    return (params["sequence_id"].int64_param, params["sequence_start"].bool_param, params["sequence_end"].bool_param)


def test_piece_k_goes_out_at_k_over_the_rate():
    assert piece_offsets(4, 10.0) == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert piece_offsets(3, 30.0) == pytest.approx([0.0, 1 / 30, 2 / 30])


def test_a_session_is_piece_zero_with_every_input_then_the_pieces_then_the_close():
    config = BenchConfig(text_rate=20.0, voice="tiny")
    schedule = request_schedule(config, _planned())
    pieces = cut_pieces(_planned().utterance.text)
    offsets, requests = zip(*schedule)
    assert len(requests) == len(pieces) + 1
    assert list(offsets) == pytest.approx([k / 20.0 for k in range(len(pieces))] + [(len(pieces) - 1) / 20.0])
    first, later, close = requests[0], requests[1:-1], requests[-1]
    assert set(_inputs(first)) == {"text", "seed", "max_audio_seconds", "ignore_eos", "voice"}
    assert [_inputs(r)["text"][4:].decode() for r in requests[:-1]] == pieces
    assert all(set(_inputs(r)) == {"text"} for r in (*later, close)) and _inputs(close)["text"][4:] == b""
    session = _sequence(first)[0]
    assert session > 0 and _sequence(first) == (session, True, False)
    assert all(_sequence(r) == (session, False, False) for r in later) and _sequence(close) == (session, False, True)
    assert first.id == "r1-s0-00003" and len({r.id for r in requests}) == len(requests)
    assert first.parameters["triton_enable_empty_final_response"].bool_param
    assert not any("triton_enable_empty_final_response" in r.parameters for r in (*later, close))


def test_whole_text_is_one_request_without_a_sequence():
    [(offset, request)] = request_schedule(BenchConfig(), _planned())
    assert offset == 0.0 and _inputs(request)["text"][4:].decode() == _planned().utterance.text
    assert "sequence_id" not in request.parameters


REFUSALS = {b" BAD": "bad_piece", b" LATE": "session_ended"}  # scripted piece refusals and their codes


class FakeSession(service_pb2_grpc.GRPCInferenceServiceServicer):
    """`vox_ensemble` taking a session: notes when each request arrives, answers each piece with its own
    final flag (refuses " BAD" and " LATE" as REFUSALS says), and after the close answers the first request with two chunks
    and the final flag."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, str, bytes]] = []  # (loop time, request id, text)

    async def ModelStreamInfer(self, request_iterator, context):
        first = None
        async for request in request_iterator:
            text = _inputs(request)["text"][4:]
            self.arrivals.append((asyncio.get_running_loop().time(), request.id, text))
            first = first or request.id
            if text in REFUSALS:
                ended = Ended(EndReason.REFUSED_BAD_INPUT, "scripted refusal", "text", REFUSALS[text])
                yield service_pb2.ModelStreamInferResponse(error_message=encode_error(ended))
            elif request.id != first:  # a piece's own empty final answer, as if it had asked for one
                yield _final(request.id)
            if request.parameters["sequence_end"].bool_param:
                break
        for index in range(2):
            yield _response(first, index, 0.1)
        yield _final(first)


def _final(request_id: str) -> service_pb2.ModelStreamInferResponse:
    final = service_pb2.ModelStreamInferResponse()
    final.infer_response.id = request_id
    final.infer_response.parameters["triton_final_response"].bool_param = True
    return final


def _run_session(text: str, text_rate: float):
    async def go():
        fake = FakeSession()
        server = grpc.aio.server()
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(fake, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            config = BenchConfig(url=f"127.0.0.1:{port}", text_rate=text_rate)
            result = await run_load(config, [replace(_planned(text), scheduled_s=0.0)], rate=1.0, seed=0)
        finally:
            await server.stop(None)
        return result, fake.arrivals
    return asyncio.run(go())


def test_the_load_generator_sends_each_piece_on_the_pace_and_records_when():
    text = "one two three four five six"
    result, arrivals = _run_session(text, text_rate=20.0)
    [record] = result.records
    assert record.error is None and [c.index for c in record.chunks] == [0, 1]
    assert b"".join(t for _, _, t in arrivals).decode() == text  # every piece, in order, once
    pieces = cut_pieces(text)
    assert len(record.piece_sent_s) == len(pieces) and record.piece_sent_s[0] >= record.sent_s
    since_start = [t - record.sent_s for t in record.piece_sent_s]
    assert since_start == pytest.approx([k / 20.0 for k in range(len(pieces))], abs=0.03)
    # the close follows the last piece at once, not a pace's tick (0.05 s) later
    assert record.piece_sent_s[-1] <= record.text_closed_s < record.piece_sent_s[-1] + 1.0 / 20.0
    server_gaps = [b - a for (a, _, _), (b, _, _) in zip(arrivals, arrivals[1:-1])]
    assert server_gaps == pytest.approx([0.05] * (len(pieces) - 1), abs=0.03)
    # the fake answers after the close: TTFA counts from the first piece
    assert record.first_audio_s - record.sent_s >= (len(pieces) - 1) / 20.0
    # the bench reports its own lateness from what it recorded: the stream's opening against its schedule, each piece
    # against the pace (how late a loaded host makes it is the bench's to report, not this test's to bound)
    lags_ms = [1e3 * (record.sent_s - record.scheduled_s)] + [1e3 * (t - k / 20.0) for k, t in
                                                              enumerate(since_start) if k]
    assert result.overhead["send_lag_ms"]["max"] == pytest.approx(max(lags_ms), abs=1e-3)


def test_a_refused_piece_leaves_the_stream_going_and_fails_the_request():
    result, arrivals = _run_session("fine BAD fine", text_rate=50.0)
    [record] = result.records
    assert len(record.chunks) == 2 and record.done_s is not None  # the stream went on to its end
    assert record.error.startswith("a piece of the text was refused: [bad_input param=text code=bad_piece]")
    assert not evaluate(record, SLO).meets_slo


def test_a_piece_that_finds_its_stream_over_does_not_fail_the_request():
    # the stream reached max_audio_seconds before its text was all sent: the rest is answered session_ended
    result, _ = _run_session("fine LATE", text_rate=50.0)
    [record] = result.records
    assert record.error is None and len(record.chunks) == 2


# ---- what a chunk needs, and stalls split by cause -----------------------------------------------------

def test_a_chunk_needs_the_piece_after_its_last_token():
    sent = [0.1 * k for k in range(20)]
    assert text_sent_by(sent, 2.0, end_frame=2) == pytest.approx(0.3)  # tokens 0..2, token 2 final with piece 3
    assert text_sent_by(sent, 2.0, end_frame=6) == pytest.approx(0.7)
    assert text_sent_by(sent, 2.0, end_frame=18) == pytest.approx(1.9)  # piece 19, the last
    assert text_sent_by(sent, 2.0, end_frame=19) == 2.0  # token 19 is the last: final at the close
    assert text_sent_by(sent, 2.0, end_frame=40) == 2.0  # a short text is needed whole
    assert text_sent_by(sent, None, end_frame=40) == math.inf  # never closed


def _session(chunk_arrivals: list[float], piece_sent_s: list[float], closed_s: float | None = None,
             sent_s: float = 0.0) -> RequestRecord:
    """Chunks of 2, 4, 8, 10 frames arriving at the given times."""
    frames = (2, 4, 8, 10, 10)
    chunks = tuple(Chunk(i, at, frames[i] * FRAME_S, "background") for i, at in enumerate(chunk_arrivals))
    closed = piece_sent_s[-1] if closed_s is None else closed_s
    return RequestRecord("r", "u", sent_s, sent_s, 3.0, chunks, 10.0, None, tuple(piece_sent_s), closed)


def _paced(num: int, rate: float, sent_s: float = 0.0) -> list[float]:
    return [sent_s + k / rate for k in range(num)]


def test_a_stall_before_its_text_was_sent_is_the_texts_one_after_is_the_servers():
    pieces = _paced(30, 20.0)  # piece 7 at 0.35 s, piece 15 at 0.75 s
    pieces[7] = 0.60  # chunk 1's text comes late
    # chunk 0 at 0.20 plays to 0.36; chunk 1 (due 0.36) arrives 0.65, after piece 7 (0.60): the text's stall;
    # chunk 2 (due 0.65 + 0.32 = 0.97) arrives 1.10, piece 15 went out at 0.75: the server's stall
    outcome = evaluate(_session([0.20, 0.65, 1.10], pieces), SLO)
    assert outcome.stalled_chunks == (1, 2) and outcome.text_stalled_chunks == (1,)
    assert (outcome.num_text_stalls, outcome.num_server_stalls) == (1, 1) and not outcome.meets_slo


def test_only_the_piece_after_the_chunks_last_token_decides():
    pieces = _paced(30, 100.0)
    late = [0.20, 0.50]  # chunk 1 due 0.36, arrives 0.50
    for k, is_text in ((7, True), (6, False), (8, False)):
        moved = list(pieces)
        moved[k] = 0.45  # after the deadline
        assert evaluate(_session(late, moved), SLO).text_stalled_chunks == ((1,) if is_text else ())


def test_text_sent_exactly_at_the_deadline_makes_it_the_servers_stall():
    pieces = _paced(30, 100.0)
    pieces[7] = 0.36  # chunk 1's deadline: 0.20 + 2 frames
    outcome = evaluate(_session([0.20, 0.50], pieces), SLO)
    assert outcome.stalled_chunks == (1,) and outcome.text_stalled_chunks == ()


def test_a_short_text_is_needed_until_its_close():
    pieces = _paced(5, 100.0)  # chunk 1 (frames [2, 6)) needs piece 7: the text has 5, so its close
    assert evaluate(_session([0.20, 0.50], pieces, closed_s=0.45), SLO).text_stalled_chunks == (1,)
    assert evaluate(_session([0.20, 0.50], pieces, closed_s=0.30), SLO).text_stalled_chunks == ()
    never = replace(_session([0.20, 0.50], pieces), text_closed_s=None)
    assert evaluate(never, SLO).text_stalled_chunks == (1,)


def test_chunk_frames_follow_the_servers_chunking():
    pieces = _paced(30, 100.0)
    pieces[5] = 0.45  # chunk 1 needs piece 5 when chunks are 2, then 2 more frames ([2, 4))
    flat = Slo(0.2, ChunkSizes(first_chunk_frames=2, chunk_frames=2, chunk_growth=None))
    assert evaluate(_session([0.20, 0.50], pieces), flat).text_stalled_chunks == (1,)
    assert evaluate(_session([0.20, 0.50], pieces), SLO).text_stalled_chunks == ()


def test_ttfa_counts_from_the_first_piece_and_the_slo_from_the_first_chunks_text():
    pieces = _paced(30, 10.0, sent_s=1.0)  # chunk 0 needs piece 3, sent at 1.3
    outcome = evaluate(_session([1.35, 1.51], pieces, sent_s=1.0), SLO)
    assert outcome.ttfa_s == pytest.approx(0.35) and outcome.server_ttfa_s == pytest.approx(0.05)
    assert outcome.num_stalls == 0 and outcome.meets_slo
    slow = evaluate(_session([1.55, 1.71], pieces, sent_s=1.0), SLO)
    assert slow.server_ttfa_s == pytest.approx(0.25) and not slow.meets_slo
    early = evaluate(_session([1.25, 1.41], pieces, sent_s=1.0), SLO)  # before piece 3: the count was high
    assert early.ttfa_s == pytest.approx(0.25) and early.server_ttfa_s == 0.0 and early.meets_slo


def test_attainment_counts_only_server_stalls_with_streamed_text():
    text_only = _session([0.20, 0.65, 0.97], _paced(30, 20.0)[:7] + [0.60] + _paced(30, 20.0)[8:])
    server = _session([0.20, 0.50], _paced(30, 100.0))
    clean = _session([0.10, 0.26], _paced(30, 100.0))
    s = summarize_rate(1.0, [RunWindow((text_only, server, clean), 3.0, 4.0)], SLO)
    assert s["num_stalled"] == 2 and s["stall_rate"] == pytest.approx(2 / 3, abs=1e-4)  # every late chunk, as before
    assert s["text_stalls"] == {"num_chunks": 1, "num_stalled": 1, "stall_rate": pytest.approx(1 / 3, abs=1e-4)}
    assert s["server_stalls"] == {"num_chunks": 1, "num_stalled": 1, "stall_rate": pytest.approx(1 / 3, abs=1e-4)}
    assert s["num_slo_met"] == 2 and s["slo_attainment"] == pytest.approx(2 / 3, abs=1e-4)  # text_only is met
    # the same timelines as whole-text requests: every stall is the server's, and text_only misses
    whole = [replace(r, piece_sent_s=(), text_closed_s=None) for r in (text_only, server, clean)]
    w = summarize_rate(1.0, [RunWindow(tuple(whole), 3.0, 4.0)], SLO)
    assert w["num_slo_met"] == 1 and w["text_stalls"]["num_chunks"] == 0 and w["server_stalls"]["num_chunks"] == 2
    assert w["server_ttfa_ms"] == w["ttfa_ms"]


def test_a_session_record_round_trips_and_old_records_read_as_whole_text():
    record = _session([0.2, 0.5], _paced(4, 10.0))
    written = json.loads(json.dumps(record.to_json()))  # as results.json holds it: lists, not tuples
    assert RequestRecord.from_json(written) == record
    old = {k: v for k, v in written.items() if k not in ("piece_sent_s", "text_closed_s")}
    assert not RequestRecord.from_json(old).is_text_stream


# ---- settings ----------------------------------------------------------------------------------------

def test_the_chunking_is_read_from_the_servers_lm_parameters():
    lm = {"model": "qwen3-tts-tiny", "max_slots": "32", "mode": "voxlane",
          "first_chunk_frames": "3", "chunk_frames": "12", "chunk_growth": "none"}
    server = {"mode": "voxlane", "speechlm_lm": lm}
    assert chunking_of(server) == ChunkSizes(first_chunk_frames=3, chunk_frames=12, chunk_growth=None)
    assert chunking_of({"mode": "voxlane", "gateway": {}}) == ChunkSizes()


def test_text_rate_flag_and_its_checks():
    parser = argparse.ArgumentParser()
    add_bench_flags(parser)
    assert bench_config(parser.parse_args(["--text-rate", "30"]), "h:1").text_rate == 30.0
    assert bench_config(parser.parse_args([]), "h:1").text_rate is None
    for bad in ({"text_rate": 0.0}, {"text_rate": 10.0, "protocol": "openai"}):
        with pytest.raises(ValueError, match="--text-rate"):
            BenchConfig(**bad)


def test_plots_label_a_text_rate_and_read_results_without_one():
    assert _label({"server": {"mode": "voxlane"}, "config": {"text_rate": 30.0}}) == "voxlane, text 30 tok/s"
    assert _label({"server": {"mode": "voxlane"}, "config": {"url": "h:1"}}) == "voxlane"
