"""The load generator against a scripted gRPC server: what it records matches what the server sent, when."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import serialize_byte_tensor

from clients.bench.config import BenchConfig
from clients.bench.loadgen import PlannedRequest, build_request, run_load
from clients.bench.records import Slo, evaluate
from clients.bench.workload import Utterance

SAMPLE_RATE = 24000


@dataclass(frozen=True)
class Script:
    """How the fake server answers every request: chunks of `chunk_s` audio, `gap_s` apart."""

    first_s: float = 0.02
    gap_s: float = 0.05
    chunk_s: float = 0.1
    num_chunks: int = 3


class FakeVox(service_pb2_grpc.GRPCInferenceServiceServicer):
    """`vox_ensemble` as a script: timed chunks, then the empty final response; text "fail" gets an error."""

    def __init__(self, script: Script) -> None:
        self.script = script

    async def ModelStreamInfer(self, request_iterator, context):
        async for request in request_iterator:
            if request.raw_input_contents[0][4:] == b"fail":
                yield service_pb2.ModelStreamInferResponse(error_message="scripted failure")
                continue
            await asyncio.sleep(self.script.first_s)
            for i in range(self.script.num_chunks):
                yield _response(request.id, i, self.script.chunk_s)
                await asyncio.sleep(self.script.gap_s)
            final = service_pb2.ModelStreamInferResponse()
            final.infer_response.id = request.id
            final.infer_response.parameters["triton_final_response"].bool_param = True
            yield final


def _response(request_id: str, index: int, chunk_s: float) -> service_pb2.ModelStreamInferResponse:
    out = service_pb2.ModelStreamInferResponse()
    response = out.infer_response
    response.id = request_id
    tensors = {"audio": ("FP32", np.zeros(int(chunk_s * SAMPLE_RATE), np.float32)),
               "sample_rate": ("INT32", np.array([SAMPLE_RATE], np.int32)),
               "chunk_index": ("INT32", np.array([index], np.int32)),
               "lane": ("BYTES", np.array([b"urgent"], np.object_))}
    for name, (datatype, array) in tensors.items():
        response.outputs.add(name=name, datatype=datatype, shape=list(array.shape))
        raw = serialize_byte_tensor(array).item() if datatype == "BYTES" else array.tobytes()
        response.raw_output_contents.append(raw)
    response.parameters["triton_final_response"].bool_param = False
    return out


async def serve_fake(script: Script) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(FakeVox(script), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def _plan(num: int, every_s: float, texts=None) -> list[PlannedRequest]:
    texts = texts or ["hello"] * num
    return [PlannedRequest(f"q{i}", Utterance(f"u{i}", 1.0, texts[i]), i * every_s, 0.3, i) for i in range(num)]


def _run(script: Script, plan: list[PlannedRequest], **config):
    async def go():
        server, url = await serve_fake(script)
        try:
            return await run_load(BenchConfig(url=url, **config), plan, rate=1.0, seed=0)
        finally:
            await server.stop(None)
    return asyncio.run(go())


def test_records_follow_the_servers_schedule():
    # 0.5 s chunks 0.05 s apart: only a hold-up of ~0.45 s would stall a listener
    result = _run(Script(chunk_s=0.5), _plan(20, 0.01), num_channels=2)
    assert [r.request_id for r in result.records] == [f"q{i}" for i in range(20)]
    for r in result.records:
        assert r.error is None and [c.index for c in r.chunks] == [0, 1, 2]
        assert r.audio_s == pytest.approx(1.5) and {c.lane for c in r.chunks} == {"urgent"}
        # never before the server could have sent it: chunk i leaves 0.02 + 0.05 i s after the request arrives
        assert all(c.arrival_s - r.sent_s >= 0.02 + 0.05 * i - 1e-3 for i, c in enumerate(r.chunks))
        assert evaluate(r, Slo(0.2)).num_stalls == 0
    # and when it came, not later: medians, as a loaded machine may hold this process back now and then
    assert np.median([r.first_audio_s - r.sent_s for r in result.records]) < 0.05
    gaps = np.diff([[c.arrival_s for c in r.chunks] for r in result.records], axis=1)
    assert np.median(np.abs(gaps - 0.05)) < 0.02
    assert result.overhead["num_responses"] == 20 * 4


def test_chunks_slower_than_playback_are_stalls():
    """0.25 s between chunks of 0.1 s: the listener waits for the second and the third, each time from the end of
    the chunk before (measured against the arrivals the load generator recorded: a loaded host delays them)."""
    result = _run(Script(gap_s=0.25, chunk_s=0.1), _plan(3, 0.0))
    for r in result.records:
        outcome = evaluate(r, Slo(0.2))
        arrivals = [c.arrival_s for c in r.chunks]
        assert outcome.stalled_chunks == (1, 2)
        assert outcome.stall_s == pytest.approx(arrivals[2] - arrivals[0] - 2 * 0.1, abs=1e-6)


def test_server_errors_are_recorded_and_do_not_stop_other_streams():
    result = _run(Script(), _plan(3, 0.0, ["hello", "fail", "hello"]))
    assert [r.error for r in result.records] == [None, "scripted failure", None]
    assert result.records[1].chunks == () and len(result.records[2].chunks) == 3


def test_a_stream_past_its_timeout_is_an_error():
    result = _run(Script(gap_s=1.0), _plan(1, 0.0), request_timeout_s=0.3)
    assert "no final response" in result.records[0].error
    assert len(result.records[0].chunks) == 1


def test_request_carries_the_contract_inputs():
    request = build_request(replace(BenchConfig(), voice="tiny"), _plan(1, 0.0)[0])
    assert [t.name for t in request.inputs] == ["text", "seed", "max_audio_seconds", "ignore_eos", "voice"]
    assert np.frombuffer(request.raw_input_contents[2], np.float32)[0] == pytest.approx(0.3)
    assert request.parameters["triton_enable_empty_final_response"].bool_param
