"""Long-form against a real tritonserver: a whole text whose frames do not fit one prompt's keys (`max_seq_len`,
2048 positions: ~160 s of Qwen3-TTS) is cut at sentence ends and spoken as one stream, all the audio it asked for
in chunks 0, 1, 2, …; before, it was refused as too long."""
from __future__ import annotations

from clients.stream import synthesize

CHAPTER = " ".join(f"The {word} boat crossed the wide river before the evening storm came in, number {i}."
                   for i, word in enumerate(["red", "old", "small", "last", "fast", "green", "slow", "blue"]))
MAX_AUDIO_S = 165.0  # 2,062 frames at 12.5 Hz: past the 2,048 positions of one slot's keys


def test_a_text_longer_than_one_prompt_can_hold_is_one_stream_of_all_its_audio(url):
    result = synthesize(url, CHAPTER, seed=4, max_audio_seconds=MAX_AUDIO_S, ignore_eos=True, timeout_s=300)
    assert [c.index for c in result.chunks] == list(range(len(result.chunks)))
    assert result.audio.size == round(MAX_AUDIO_S * 12.5) * 1920  # ignore_eos: the last segment runs to the end
