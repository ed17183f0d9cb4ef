"""The open-loop load generator: one gRPC stream per request, all on one asyncio event loop.

Requests go out at their scheduled times whatever the server's state (open loop). Each stream is a raw
`ModelStreamInfer` call so the request can ask for Triton's empty final response (the aio client's
`stream_infer` cannot), which is how a stream's end is known. With `--text-rate` each request is a
streaming-text session on its stream (docs/STREAMING.md, "Streaming text in"): the first request carries piece 0
and every other input, each later piece goes out at its time on the text's pace, then the close.
"""
from __future__ import annotations

import asyncio
import random
import secrets
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
import numpy as np
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc
from tritonclient.utils import serialize_byte_tensor

from clients.bench.arrivals import arrival_times
from clients.bench.audio_pace import (SAMPLE_RATE, audio_offsets, audio_pieces, enrollment, input_audio,
                                      input_samples, piece_frames)
from clients.bench.config import BenchConfig
from clients.bench.overhead import LoopLagMonitor, overhead_summary
from clients.bench.records import Chunk, RequestRecord
from clients.bench.text_pace import cut_pieces, piece_offsets
from clients.bench.workload import Utterance, request_seconds
from protocol.models import ROUTER
from protocol.tensors import PIECE_ERROR_CODES, REQUEST_INPUTS, scalar_array
from protocol.wire import decode_error

FINAL = "triton_final_response"


@dataclass(frozen=True)
class PlannedRequest:
    request_id: str
    utterance: Utterance
    scheduled_s: float
    audio_s: float
    seed: int


@dataclass(frozen=True)
class RunResult:
    rate: float
    seed: int
    window_s: float  # arrivals happen in [0, window_s)
    wall_s: float  # from the start until the last stream ended (the drain included)
    records: tuple[RequestRecord, ...]
    overhead: dict


def plan_run(config: BenchConfig, utterances: list[Utterance], rate: float, seed: int) -> list[PlannedRequest]:
    """The requests of one run: seeded arrival times, each with a seeded draw from the workload."""
    times = arrival_times(rate, config.duration_s, seed, config.arrival, config.burstiness)
    rng = random.Random(f"{seed}-{rate}")
    plan = []
    for i, at in enumerate(times):
        utterance = rng.choice(utterances)
        plan.append(PlannedRequest(f"r{rate:g}-s{seed}-{i:05d}", utterance, at,
                                   request_seconds(utterance, config.audio_scale, config.max_audio_seconds),
                                   seed * 1_000_003 + i))
    return plan


def request_tensors(config: BenchConfig, planned: PlannedRequest) -> dict[str, np.ndarray]:
    """The inputs of one planned request, each of shape [1] (perf_analyzer's input data holds the same)."""
    values = {"text": planned.utterance.text, "seed": planned.seed, "max_audio_seconds": planned.audio_s,
              "ignore_eos": config.ignore_eos}
    if config.voice:
        values["voice"] = config.voice
    return {name: scalar_array(name, value) for name, value in values.items()}


def build_request(config: BenchConfig, planned: PlannedRequest) -> service_pb2.ModelInferRequest:
    return _infer_request(planned.request_id, request_tensors(config, planned), wants_final=True)


def request_schedule(config: BenchConfig, planned: PlannedRequest) -> list[tuple[float, service_pb2.ModelInferRequest]]:
    """(seconds after the start, request) for each request of one stream; the first one's responses are the audio.

    Whole text: the one request. Streamed text: the session (a Triton sequence): piece 0 with every other
    input and sequence_start, piece k at k / text_rate, then an empty sequence_end at once after the last.
    """
    if config.is_audio_in:
        return audio_in_schedule(config, planned)
    if not config.is_text_stream:
        return [(0.0, build_request(config, planned))]
    pieces = cut_pieces(planned.utterance.text) or [""]
    session = secrets.randbits(62) + 1  # sequence ids are the server's, shared by every client
    tensors = {**request_tensors(config, planned), "text": scalar_array("text", pieces[0])}
    first = _infer_request(planned.request_id, tensors, wants_final=True)
    later = [_infer_request(f"{planned.request_id}-{k}", {"text": scalar_array("text", piece)})
             for k, piece in enumerate(pieces[1:], start=1)]
    close = _infer_request(f"{planned.request_id}-end", {"text": scalar_array("text", "")})
    _set_sequence(first, session, start=True)
    for request in later:
        _set_sequence(request, session)
    _set_sequence(close, session, end=True)
    offsets = piece_offsets(len(pieces), config.text_rate)
    return list(zip(offsets + offsets[-1:], [first, *later, close]))


def audio_in_schedule(config: BenchConfig, planned: PlannedRequest) -> list[tuple[float, service_pb2.ModelInferRequest]]:
    """An audio-in session (audio_pace.py): the first request with the enrollment and `input_sample_rate`, each
    80-ms piece of the input at its time on `audio_in_rate`, then an empty sequence_end at once after the last.
    The output cap leaves room for the whole input's answer (as long as the input)."""
    pieces = audio_pieces(input_audio(planned.audio_s, planned.seed))
    session = secrets.randbits(62) + 1
    values = {"seed": planned.seed, "max_audio_seconds": planned.audio_s + 1.0, "input_sample_rate": SAMPLE_RATE,
              "ref_audio": enrollment(), "ref_sample_rate": SAMPLE_RATE, "x_vector_only": True}
    first = _infer_request(planned.request_id, {name: scalar_array(name, value) for name, value in values.items()},
                           wants_final=True)
    later = [_infer_request(f"{planned.request_id}-{k}", {"input_audio": scalar_array("input_audio", piece)})
             for k, piece in enumerate(pieces, start=1)]
    close = _infer_request(f"{planned.request_id}-end", {"input_audio": np.zeros(0, np.float32)})
    _set_sequence(first, session, start=True)
    for request in later:
        _set_sequence(request, session)
    _set_sequence(close, session, end=True)
    offsets = audio_offsets(len(pieces), config.audio_in_rate)
    return list(zip([0.0, *offsets, offsets[-1]], [first, *later, close]))


def _infer_request(request_id: str, tensors: dict[str, np.ndarray], wants_final: bool = False):
    request = service_pb2.ModelInferRequest(model_name=ROUTER, id=request_id)
    for name, array in tensors.items():
        spec = REQUEST_INPUTS[name]
        request.inputs.add(name=name, datatype=spec.triton_type, shape=list(array.shape))
        raw = serialize_byte_tensor(array).item() if spec.triton_type == "BYTES" else array.tobytes()
        request.raw_input_contents.append(raw)
    if wants_final:  # the stream's end; a piece's own empty answer is not asked for
        request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


def _set_sequence(request: service_pb2.ModelInferRequest, session: int, start: bool = False, end: bool = False):
    """Triton's sequence parameters, as tritonclient's async_stream_infer sets them."""
    request.parameters["sequence_id"].int64_param = session
    request.parameters["sequence_start"].bool_param = start
    request.parameters["sequence_end"].bool_param = end


async def run_load(config: BenchConfig, plan: list[PlannedRequest], rate: float, seed: int) -> RunResult:
    """Send the plan open-loop and wait until every stream has ended."""
    monitor = LoopLagMonitor()
    lag_task = asyncio.create_task(monitor.run())
    cpu0, t0 = time.process_time(), time.perf_counter()
    async with _connections(config) as stubs:
        streams = _Streams(config, stubs, t0, [])
        try:
            tasks = await _dispatch(streams, plan)
            records = tuple(await asyncio.gather(*tasks))
        finally:
            monitor.stop()
            await lag_task
    wall = time.perf_counter() - t0
    overhead = overhead_summary(monitor.lags_s, [lag for r in records for lag in _send_lags(r, config)],
                                (time.process_time() - cpu0) / wall, streams.handling_s)
    return RunResult(rate, seed, config.duration_s, wall, records, overhead)


def _send_lags(record: RequestRecord, config: BenchConfig) -> list[float]:
    """How late each request of the stream went out: the first against its arrival, pieces against the pace."""
    if record.is_audio_in:
        offsets = [0.0, *audio_offsets(len(record.piece_sent_s) - 1, config.audio_in_rate)]
    else:
        offsets = piece_offsets(len(record.piece_sent_s), config.text_rate) if record.is_text_stream else [0.0]
    return [record.sent_s - record.scheduled_s] + [sent - record.sent_s - offset for sent, offset
                                                   in zip(record.piece_sent_s[1:], offsets[1:])]


_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]


@asynccontextmanager
async def _connections(config: BenchConfig):
    """What the streams are sent over: gRPC stubs, or one HTTP session for `--protocol openai`."""
    if config.protocol == "openai":
        from clients.bench.openai_stream import openai_session
        async with openai_session() as session:
            yield [session]
        return
    channels = [grpc.aio.insecure_channel(config.url, options=_CHANNEL_OPTIONS) for _ in range(config.num_channels)]
    try:
        yield [service_pb2_grpc.GRPCInferenceServiceStub(c) for c in channels]
    finally:
        for channel in channels:
            await channel.close()


@dataclass(frozen=True)
class _Streams:
    """What every stream of one run shares."""

    config: BenchConfig
    stubs: list
    t0: float  # perf_counter at the start of the run
    handling_s: list[float]  # per response: from its arrival on the loop until it is recorded

    def now(self) -> float:
        return time.perf_counter() - self.t0


async def _dispatch(streams: _Streams, plan: list[PlannedRequest]) -> list[asyncio.Task]:
    tasks = []
    for i, planned in enumerate(plan):
        delay = planned.scheduled_s - streams.now()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_open(streams)(streams, streams.stubs[i % len(streams.stubs)], planned)))
    return tasks


def _open(streams: _Streams):
    if streams.config.protocol == "openai":
        from clients.bench.openai_stream import http_stream
        return http_stream
    return _stream


async def _stream(streams: _Streams, stub, planned: PlannedRequest) -> RequestRecord:
    schedule = request_schedule(streams.config, planned)
    finished = asyncio.Event()
    sent, sent_at = streams.now(), []

    async def requests():
        for offset, request in schedule:
            if await _finishes_within(finished, sent + offset - streams.now()):
                return  # the stream ended early (an error): the rest of the text is not sent
            sent_at.append(streams.now())
            yield request
        await finished.wait()  # keep the stream half open until the final response

    call = stub.ModelStreamInfer(requests())
    chunks, refused = [], []
    try:
        error = await asyncio.wait_for(_receive(streams, call, planned.request_id, chunks, refused),
                                       streams.config.request_timeout_s)
    except asyncio.TimeoutError:
        call.cancel()
        error = f"no final response within {streams.config.request_timeout_s:g} s"
    except grpc.aio.AioRpcError as exc:
        error = f"grpc {exc.code().name}: {exc.details()}"
    finally:
        finished.set()
    if error is None and (bad := [r for r in refused if decode_error(r).code != STREAM_OVER]):
        error = f"a piece of the text was refused: {bad[0]}"
    text = _text_times(sent_at, len(schedule)) if streams.config.is_session else {}
    if streams.config.is_audio_in:  # the first request carries no input: 0 frames
        frames = [0.0, *piece_frames(input_samples(planned.audio_s))]  # from the lengths: no second input
        text["piece_frames"] = tuple(frames[:len(text["piece_sent_s"])])
    return RequestRecord(planned.request_id, planned.utterance.utterance_id, planned.scheduled_s, sent,
                         planned.audio_s, tuple(chunks), streams.now(), error, **text)


STREAM_OVER = "session_ended"  # a piece that came after the stream ended (at max_audio_seconds): not a failure


async def _finishes_within(finished: asyncio.Event, delay_s: float) -> bool:
    """Wait `delay_s` unless the stream finishes first; whether it has finished."""
    if delay_s > 0:
        try:
            await asyncio.wait_for(finished.wait(), delay_s)
        except asyncio.TimeoutError:
            pass
    return finished.is_set()


def _text_times(sent_at: list[float], num_requests: int) -> dict:
    """A session's record fields: each piece's send time, and the close's if it went out."""
    is_closed = len(sent_at) == num_requests
    return {"piece_sent_s": tuple(sent_at[:-1] if is_closed else sent_at),
            "text_closed_s": sent_at[-1] if is_closed else None}


async def _receive(streams: _Streams, call, request_id: str, chunks: list[Chunk], refused: list[str]) -> str | None:
    """Append each audio chunk as it arrives; the error message if the server sent one. A refused piece
    (its code in PIECE_ERROR_CODES) leaves the stream going and is kept in `refused`."""
    async for response in call:
        arrived = streams.now()
        if response.error_message:
            if decode_error(response.error_message).code not in PIECE_ERROR_CODES:
                return response.error_message
            refused.append(response.error_message)
        elif response.infer_response.id == request_id:  # not a piece's own answer
            result = InferResult(response.infer_response)
            if result.get_output("audio") is not None:
                chunks.append(_chunk(result, arrived))
            if response.infer_response.parameters[FINAL].bool_param:
                streams.handling_s.append(streams.now() - arrived)
                return None
        streams.handling_s.append(streams.now() - arrived)
    return "stream closed before the final response"


def _chunk(result: InferResult, arrived: float) -> Chunk:
    num_samples = result.get_output("audio").shape[0]
    sample_rate = int(result.as_numpy("sample_rate")[0])
    return Chunk(int(result.as_numpy("chunk_index")[0]), arrived, num_samples / sample_rate,
                 result.as_numpy("lane")[0].decode())
