"""The open-loop load generator: one gRPC stream per request, all on one asyncio event loop.

Requests go out at their scheduled times whatever the server's state (open loop). Each stream is a raw
`ModelStreamInfer` call so the request can ask for Triton's empty final response (the aio client's
`stream_infer` cannot), which is how a stream's end is known.
"""
from __future__ import annotations

import asyncio
import random
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
import numpy as np
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc
from tritonclient.utils import serialize_byte_tensor

from clients.bench.arrivals import arrival_times
from clients.bench.config import BenchConfig
from clients.bench.overhead import LoopLagMonitor, overhead_summary
from clients.bench.records import Chunk, RequestRecord
from clients.bench.workload import Utterance, request_seconds
from protocol.models import ROUTER
from protocol.tensors import REQUEST_INPUTS, scalar_array

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
    request = service_pb2.ModelInferRequest(model_name=ROUTER, id=planned.request_id)
    for name, array in request_tensors(config, planned).items():
        spec = REQUEST_INPUTS[name]
        request.inputs.add(name=name, datatype=spec.triton_type, shape=list(spec.shape))
        raw = serialize_byte_tensor(array).item() if spec.triton_type == "BYTES" else array.tobytes()
        request.raw_input_contents.append(raw)
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


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
    overhead = overhead_summary(monitor.lags_s, [r.sent_s - r.scheduled_s for r in records],
                                (time.process_time() - cpu0) / wall, streams.handling_s)
    return RunResult(rate, seed, config.duration_s, wall, records, overhead)


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
    request = build_request(streams.config, planned)
    finished = asyncio.Event()

    async def requests():
        yield request
        await finished.wait()  # keep the stream half open until the final response

    call = stub.ModelStreamInfer(requests())
    sent, chunks = streams.now(), []
    try:
        error = await asyncio.wait_for(_receive(streams, call, chunks), streams.config.request_timeout_s)
    except asyncio.TimeoutError:
        call.cancel()
        error = f"no final response within {streams.config.request_timeout_s:g} s"
    except grpc.aio.AioRpcError as exc:
        error = f"grpc {exc.code().name}: {exc.details()}"
    finally:
        finished.set()
    return RequestRecord(planned.request_id, planned.utterance.utterance_id, planned.scheduled_s, sent,
                         planned.audio_s, tuple(chunks), streams.now(), error)


async def _receive(streams: _Streams, call, chunks: list[Chunk]) -> str | None:
    """Append each audio chunk as it arrives; the error message if the server sent one."""
    async for response in call:
        arrived = streams.now()
        if response.error_message:
            return response.error_message
        result = InferResult(response.infer_response)
        if result.get_output("audio") is not None:
            chunks.append(_chunk(result, arrived))
        streams.handling_s.append(streams.now() - arrived)
        if response.infer_response.parameters[FINAL].bool_param:
            return None
    return "stream closed before the final response"


def _chunk(result: InferResult, arrived: float) -> Chunk:
    num_samples = result.get_output("audio").shape[0]
    sample_rate = int(result.as_numpy("sample_rate")[0])
    return Chunk(int(result.as_numpy("chunk_index")[0]), arrived, num_samples / sample_rate,
                 result.as_numpy("lane")[0].decode())
