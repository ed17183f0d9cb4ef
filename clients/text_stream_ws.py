"""Streaming text in through the gateway's WebSocket: the example of docs/STREAMING.md and docs/GATEWAY.md.

    python -m clients.text_stream_ws ws://localhost:9000 "Get the trust fund to the bank early." out.wav

The code between the markers is the documented example, word for word (tests/unit/test_gateway_ws.py
checks both documents against it; tests/e2e/test_gateway_text_stream.py runs it).
"""
from __future__ import annotations

# example: begin
import asyncio, json, sys, wave
import aiohttp


async def speak_words(url: str, text: str, path: str, words_per_s: float = 3.0, **session) -> dict:
    """Send `text` word by word (as an LLM writes it), write the audio to the WAV file `path`; the audio.done event."""
    async with aiohttp.ClientSession() as http, http.ws_connect(url + "/v1/audio/speech/stream") as ws:
        await ws.send_json({"type": "session.update", "session": {"response_format": "pcm", **session}})
        writer = asyncio.create_task(send_words(ws, text, words_per_s))
        pcm, event = bytearray(), {}
        async for message in ws:  # audio as binary messages, events as JSON, until the gateway closes
            if message.type is aiohttp.WSMsgType.BINARY:
                pcm += message.data  # 16-bit little-endian mono
            elif message.type is aiohttp.WSMsgType.TEXT and (event := json.loads(message.data))["type"] == "error":
                print(f"error {event['code']}: {event['message']}", file=sys.stderr)  # a refused piece, or the end
        await writer
    if event.get("type") != "audio.done":
        raise RuntimeError(f"the session ended without its audio: {event or 'the socket closed'}")
    with wave.open(path, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(event["sample_rate"])
        out.writeframes(bytes(pcm))
    return event


async def send_words(ws, text: str, words_per_s: float) -> None:
    for i, word in enumerate(text.split(" ")):
        if ws.closed:  # the session ended early (its error event says why)
            return
        await ws.send_json({"type": "input_text.append", "text": word if i == 0 else " " + word})
        await asyncio.sleep(1 / words_per_s if words_per_s else 0)
    await ws.send_json({"type": "input_text.done"})
# example: end


if __name__ == "__main__":
    print(asyncio.run(speak_words(*sys.argv[1:4])))
