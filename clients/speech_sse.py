"""A voice agent's HTTP speech request through the gateway (docs/GATEWAY.md): the audio as SSE deltas, each with
the words it speaks (`timestamps` "word"), optionally at a `speed` and with the peers' `language` and
`instructions`.

    python -m clients.speech_sse http://localhost:9000 "Get the trust fund to the bank early." --speed 1.25
"""
from __future__ import annotations

import argparse
import base64
import json

import httpx


# example: begin
def speak_with_words(base_url: str, text: str, model: str = "qwen3-tts-tiny", **fields) -> tuple[bytes, list[dict]]:
    """16-bit PCM of `text` and its words `[{"word", "start", "end"}]`, in seconds of that audio."""
    body = {"model": model, "input": text, "voice": "alloy", "response_format": "pcm", "stream_format": "sse",
            "timestamps": "word", **fields}
    pcm, words = bytearray(), []
    with httpx.stream("POST", f"{base_url}/v1/audio/speech", json=body, timeout=60) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "speech.audio.delta":
                    pcm += base64.b64decode(event["audio"])  # play it as it comes
                    words += event.get("words", [])
    return bytes(pcm), words
# example: end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the gateway, e.g. http://localhost:9000")
    parser.add_argument("text")
    parser.add_argument("--model", default="qwen3-tts-tiny")
    parser.add_argument("--speed", type=float, default=None, help="0.25 to 4 (pitch kept)")
    parser.add_argument("--language", default=None, help="e.g. English (the model's languages, or auto)")
    parser.add_argument("--instructions", default=None, help="a style, for a model with an instruct input")
    args = parser.parse_args()
    fields = {k: v for k, v in vars(args).items() if k in ("speed", "language", "instructions") and v is not None}
    pcm, words = speak_with_words(args.url, args.text, args.model, **fields)
    for word in words:
        print(f"{word['start']:6.2f} {word['end']:6.2f} {word['word']}")
    print(f"{len(pcm)} bytes of 16-bit PCM at the model's rate")


if __name__ == "__main__":
    main()
