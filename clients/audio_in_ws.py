"""Streaming audio in through the gateway's WebSocket: the example of docs/STREAMING.md ("Streaming audio in").

    python -m clients.audio_in_ws ws://localhost:9000 target in.wav out.wav

`target` is a registered voice (the target speaker's enrollment: `voxlane voices register target clip.wav
--x-vector-only`); `in.wav` is 16-bit mono PCM, sent at real time in 80-ms binary messages. The code between the
markers is the documented example, word for word (tests/e2e/test_audio_in.py runs it).
"""
from __future__ import annotations

# example: begin
import asyncio, json, sys, wave
import aiohttp


async def extract(url: str, voice: str, in_path: str, out_path: str, piece_ms: float = 80.0) -> dict:
    """Stream `in_path` in at real time, write what the model makes of it to `out_path`; the audio.done event."""
    with wave.open(in_path) as source:
        rate, pcm_in = source.getframerate(), source.readframes(source.getnframes())
    async with aiohttp.ClientSession() as http, http.ws_connect(url + "/v1/audio/speech/stream") as ws:
        await ws.send_json({"type": "session.update", "session": {"voice": voice, "input_sample_rate": rate}})
        sender = asyncio.create_task(send_audio(ws, pcm_in, int(rate * piece_ms / 1000) * 2, piece_ms / 1000))
        pcm, event = bytearray(), {}
        async for message in ws:  # audio as binary messages, events as JSON, until the gateway closes
            if message.type is aiohttp.WSMsgType.BINARY:
                pcm += message.data  # 16-bit little-endian mono
            elif message.type is aiohttp.WSMsgType.TEXT and (event := json.loads(message.data))["type"] == "error":
                print(f"error {event['code']}: {event['message']}", file=sys.stderr)  # a refused piece, or the end
        await sender
    if event.get("type") != "audio.done":
        raise RuntimeError(f"the session ended without its audio: {event or 'the socket closed'}")
    with wave.open(out_path, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(event["sample_rate"])
        out.writeframes(bytes(pcm))
    return event


async def send_audio(ws, pcm: bytes, piece_bytes: int, piece_s: float) -> None:
    for start in range(0, len(pcm), piece_bytes):
        if ws.closed:  # the session ended early (its error event says why)
            return
        await ws.send_bytes(pcm[start:start + piece_bytes])
        await asyncio.sleep(piece_s)  # the input's own pace: a microphone's
    await ws.send_json({"type": "input_audio.done"})
# example: end


if __name__ == "__main__":
    print(asyncio.run(extract(*sys.argv[1:5])))
