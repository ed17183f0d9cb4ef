"""A whole text too long for one prompt (a chapter) in the LM's loop, Qwen3-TTS tiny on the CPU: cut at sentence
ends (text_segments.WHOLE_TEXT_RULES), each segment prefilled into the request's slot in turn, and the stream's
chunks run on across them as one stream whose KV never holds more than one segment."""
from __future__ import annotations

import torch

from backend_python.engine.sequence import Sequence
from backend_python.models.base import SamplingParams
from backend_python.models.text_segments import WHOLE_TEXT_RULES, open_whole_text
from tests.unit.test_engine import ListSink, lm, make_engine, run_until_done  # noqa: F401 (the lm fixture)
from tests.unit.test_engine_segments import assert_one_stream, frames_of

CHAPTER = " ".join(f"The {word} boat crossed the river before the storm came in number {i}."
                   for i, word in enumerate(["red", "old", "small", "last", "fast", "wide", "slow", "blue"]))
EXTRA_FRAMES = 7  # the last segment runs on to max_frames (ignore_eos)


def test_a_chapter_is_spoken_segment_by_segment_as_one_stream(lm, monkeypatch):
    prompts = []
    prefill = lm.prefill_batch
    monkeypatch.setattr(lm, "prefill_batch", lambda slots, batch: prompts.extend(batch) or prefill(slots, batch))
    feed = open_whole_text(lm, CHAPTER, None)
    segments = list(feed._ready)
    budgets = [WHOLE_TEXT_RULES.budget_frames(s, lm.frame_rate) for s in segments]
    max_frames = sum(budgets) + EXTRA_FRAMES
    one_prompt = lm.encode_prompt(CHAPTER, None).num_tokens + max_frames + 1
    engine = make_engine(lm, max_seq_len=max(p + b for p, b in zip(
        [lm.encode_prompt(s, None).num_tokens for s in segments], budgets)) + EXTRA_FRAMES + 1)
    assert one_prompt > engine.config.max_seq_len  # the whole text would not fit one slot's keys
    sink = ListSink()
    engine.add(Sequence(request_id="chapter", prompt=feed.prompt(), sampling=SamplingParams(), ignore_eos=True,
                        max_frames=max_frames, sink=sink, generator=torch.Generator().manual_seed(5), text=feed))
    run_until_done(engine, [sink], max_steps=2 * max_frames)

    assert sink.error is None and len(segments) >= 3
    assert all(s.endswith(".") for s in segments) and " ".join(segments) == CHAPTER
    assert [p.tensors["text_ids"].tolist() for p in prompts] == \
        [lm.encode_prompt(s, None).tensors["text_ids"].tolist() for s in segments]
    assert_one_stream(sink)
    assert frames_of(sink).shape[0] == max_frames
