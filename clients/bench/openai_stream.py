"""One benchmark request through the OpenAI-compatible gateway (`--protocol openai`).

The request asks for raw 16-bit PCM (`stream_format=audio`); every piece of the body is recorded
when it arrives, with the audio seconds it carries, so stalls and TTFA are judged exactly as for
the gRPC stream (a piece is a chunk, or part of one, or two that TCP delivered together).
"""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import aiohttp

from clients.bench.records import Chunk, RequestRecord

SAMPLE_BYTES = 2  # int16 mono
LANE = "gateway"  # the gateway does not say which codec lane decoded a chunk


@asynccontextmanager
async def openai_session():
    """One connection per stream (HTTP/1.1), with no pool limit: the load is open-loop."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        yield session


def speech_body(config, planned) -> dict:
    body = {"model": "tts-1", "input": planned.utterance.text, "voice": config.voice or "alloy",
            "response_format": "pcm", "stream_format": "audio", "seed": planned.seed,
            "max_audio_seconds": planned.audio_s, "ignore_eos": config.ignore_eos}
    return body


async def http_stream(streams, session: aiohttp.ClientSession, planned) -> RequestRecord:
    """Send one request at once and record each piece of audio as it arrives."""
    url = f"http://{streams.config.url}/v1/audio/speech"
    sent, chunks = streams.now(), []
    try:
        error = await asyncio.wait_for(_receive(streams, session, url, planned, chunks),
                                       streams.config.request_timeout_s)
    except asyncio.TimeoutError:
        error = f"no end of stream within {streams.config.request_timeout_s:g} s"
    except aiohttp.ClientError as exc:
        error = f"http {type(exc).__name__}: {exc}"
    return RequestRecord(planned.request_id, planned.utterance.utterance_id, planned.scheduled_s, sent,
                         planned.audio_s, tuple(chunks), streams.now(), error)


async def _receive(streams, session, url: str, planned, chunks: list[Chunk]) -> str | None:
    async with session.post(url, json=speech_body(streams.config, planned)) as response:
        if response.status != 200:
            return await _error_message(response)
        sample_rate = int(response.headers["X-Sample-Rate"])  # the gateway sets it on every audio response
        async for piece in response.content.iter_any():
            arrived = streams.now()
            chunks.append(Chunk(len(chunks), arrived, len(piece) / SAMPLE_BYTES / sample_rate, LANE))
            streams.handling_s.append(streams.now() - arrived)
    return None


async def _error_message(response: aiohttp.ClientResponse) -> str:
    text = await response.text()
    try:
        return f"http {response.status}: {(await response.json(content_type=None))['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return f"http {response.status}: {text[:200]}"
