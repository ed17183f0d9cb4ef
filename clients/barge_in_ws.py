"""A voice agent's barge-in over the gateway's WebSocket (docs/GATEWAY.md): speak one utterance with word
timestamps, cancel it once the listener has heard `cut_after_s` of it (the user spoke), then speak the reply on
the same socket.

    python -m clients.barge_in_ws ws://localhost:9000/v1/audio/speech/stream "A long answer ..." "Sure, go on."
"""
from __future__ import annotations

import argparse
import asyncio
import json

import aiohttp


async def speak_then_barge_in(url: str, text: str, next_text: str, cut_after_s: float = 1.0, **session) -> dict:
    """The `response.cancelled` event of the cut utterance, the words heard before it, and the next utterance's
    `audio.done`."""
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_json({"type": "session.update", "session": {"timestamps": "word", **session}})
        heard_s, words = await _speak(ws, text, until_s=cut_after_s)
        await ws.send_json({"type": "response.cancel", "audio_end_ms": round(heard_s * 1000)})
        cancelled = await _event(ws, "response.cancelled")
        await _speak(ws, next_text)
        done = await _event(ws, "audio.done")
    return {"cancelled": cancelled, "words_heard": [w for w in words if w["start"] < heard_s], "next": done}


async def _speak(ws, text: str, until_s: float | None = None) -> tuple[float, list[dict]]:
    """Send `text` whole; with `until_s`, read until that much audio came (16-bit PCM at 24 kHz): (seconds, words)."""
    await ws.send_json({"type": "input_text.append", "text": text})
    await ws.send_json({"type": "input_text.done"})
    seconds, words = 0.0, []
    while until_s is not None and seconds < until_s:
        message = await ws.receive(timeout=60)
        if message.type is aiohttp.WSMsgType.BINARY:
            seconds += len(message.data) / 2 / 24000
        elif message.type is aiohttp.WSMsgType.TEXT:
            event = json.loads(message.data)
            if event["type"] != "audio.words":
                raise RuntimeError(f"the utterance ended before {until_s} s: {event}")
            words += event["words"]
        else:
            raise RuntimeError(f"the socket closed: {message.type}")
    return min(seconds, until_s or seconds), words


async def _event(ws, kind: str) -> dict:
    """Skip audio and words until the event `kind` (an error event raises)."""
    while True:
        message = await ws.receive(timeout=60)
        if message.type is aiohttp.WSMsgType.TEXT:
            event = json.loads(message.data)
            if event["type"] == kind:
                return event
            if event["type"] == "error":
                raise RuntimeError(f"{event['code']}: {event['message']}")
        elif message.type is not aiohttp.WSMsgType.BINARY:
            raise RuntimeError(f"the socket closed before {kind}: {message.type}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("text")
    parser.add_argument("next_text")
    parser.add_argument("--cut-after-s", type=float, default=1.0)
    args = parser.parse_args()
    result = asyncio.run(speak_then_barge_in(args.url, args.text, args.next_text, args.cut_after_s))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
