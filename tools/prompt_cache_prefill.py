"""What a cached voice prompt saves a Qwen3-TTS prefill: the same request's prefill with its voice's prefix computed
(a miss, the whole prompt) and copied from the cache (a hit, its own positions only), side by side in one process.

    python3 -m tools.prompt_cache_prefill --preset qwen3-tts-0.6b --repeats 5

For a preset voice, then the same voice with a 38-token instruction: the prompt's positions, the cached prefix's,
and the median prefill time of a miss and of a hit over `--repeats` requests of other texts (random weights,
float32 on the CPU unless `--device cuda`). One JSON line per prompt.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from backend_python.models.base import PromptOptions
from backend_python.models.prompt_cache import PromptCache
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config
from backend_python.models.qwen3_tts.prompt import num_prefix_positions

TEXTS = ("The quick brown fox jumps over the lazy dog.", "She sells sea shells by the sea shore.",
         "A journey of a thousand miles begins with a single step.", "Streaming speech starts before the text ends.",
         "Every chunk has a deadline, and the lanes keep it.", "Rain in the valley turned to snow on the pass.")
INSTRUCTIONS = ("Speak slowly and calmly, in a low voice, as if telling a bedtime story to a child who is almost "
                "asleep, with long pauses.")


def prefill_s(lm: Qwen3TTSLM, prompt, slot: int) -> float:
    if lm.device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    lm.prefill(slot, prompt)
    if lm.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def measure(lm: Qwen3TTSLM, options: PromptOptions, repeats: int) -> dict:
    """A miss (no cache) and a hit (the prefix cached by a first request) for each of `repeats` texts."""
    prompts = [lm.encode_prompt(TEXTS[i % len(TEXTS)], None, options=options) for i in range(repeats + 1)]
    lm.prompt_cache = None
    miss = [prefill_s(lm, prompt, 1) for prompt in prompts[1:]]
    lm.prompt_cache = PromptCache(1 << 30)
    lm.prefill(0, prompts[0])  # keeps the voice's prefix
    lm.prefill(1, prompts[0])  # warms the hit's shapes, as the miss's were warmed
    hit = [prefill_s(lm, prompt, 1) for prompt in prompts[1:]]
    stats = lm.prompt_cache.stats()
    lm.prompt_cache = None
    assert stats.hits == repeats + 1, f"expected {repeats + 1} hits, got {stats.hits}"
    prompt = prompts[1]
    return {"positions": prompt.num_tokens, "cached_positions": num_prefix_positions(lm.config, prompt),
            "miss_ms": round(1e3 * statistics.median(miss), 2), "hit_ms": round(1e3 * statistics.median(hit), 2),
            "ratio": round(statistics.median(miss) / statistics.median(hit), 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="qwen3-tts-tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    lm = Qwen3TTSLM.from_config(preset_config(args.preset), device=args.device, seed=0)
    lm.allocate_slots(2, 512)
    for name, options in (("preset voice", PromptOptions()), ("with instructions", PromptOptions(
            instructions=INSTRUCTIONS))):
        lm.prefill(1, lm.encode_prompt(TEXTS[0], None, options=options))  # warm-up
        print(json.dumps({"preset": args.preset, "prompt": name, **measure(lm, options, args.repeats)}), flush=True)


if __name__ == "__main__":
    main()
