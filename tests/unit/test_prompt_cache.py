"""Cached voice prompts (models/prompt_cache.py): the LRU's hits, misses, byte budget and forgetting; and a
Qwen3-TTS prefill that copies a cached prefix against the whole prompt's prefill (CPU float32).

A hit is not bit-exact: its own positions run as a matmul of fewer rows than the whole prompt's, and the CPU's
BLAS sums them in another order, so the last hidden state moves by float32 rounding (observed ~1e-6 on values
~2.6). The tests pin logits and hidden states within 1e-5 and the sampled codes equal."""
from __future__ import annotations

import pytest
import torch

from backend_python.models.base import DecodeBatch, PromptOptions, SamplingParams, VoiceReference
from backend_python.models.layers.decoder import KVCache
from backend_python.models.prompt_cache import CachedPrefix, PrefixKey, PromptCache, speaker_digest
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config
from backend_python.models.qwen3_tts.prompt import num_prefix_positions, prefix_embeddings, prefix_key
from tests.unit.lm_graph_helpers import TEXTS, needs_cuda

torch.set_flush_denormal(True)
SAMPLED = SamplingParams(temperature=0.9, top_k=50, top_p=0.9, repetition_penalty=1.05)
CALM = "Speak slowly and calmly."
TOLERANCE = dict(rtol=1e-5, atol=1e-5)


# ---- the LRU ---------------------------------------------------------------------------------
def entry(num_positions: int, value: float = 0.0) -> CachedPrefix:
    """A prefix of 1 layer, 1 head of 2 dims, float32: 16 bytes a position (keys and values)."""
    return CachedPrefix(torch.full((1, num_positions, 1, 2), value), torch.full((1, num_positions, 1, 2), value))


def key(name: str, speaker: str | None = None) -> PrefixKey:
    return PrefixKey(((ord(name[0]),), (1, 2)), speaker)


def test_a_miss_then_a_hit_and_the_counts():
    cache = PromptCache(1024)
    assert cache.get(key("a")) is None
    cache.put(key("a"), entry(4, 1.0))
    assert torch.equal(cache.get(key("a")).k, entry(4, 1.0).k)
    assert cache.get(key("a", speaker="x")) is None  # a cloned voice's prefix is another key
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.num_bytes, stats.num_entries) == (1, 2, 64, 1)


def test_the_byte_budget_evicts_the_least_recently_used():
    cache = PromptCache(3 * 64)  # three 4-position entries
    for name in "abc":
        cache.put(key(name), entry(4))
    cache.get(key("a"))  # b is now the least recently used
    cache.put(key("d"), entry(4))
    assert cache.get(key("b")) is None and all(cache.get(key(n)) is not None for n in "acd")
    cache.put(key("e"), entry(8))  # 128 bytes: two entries go
    assert cache.stats().num_bytes == 3 * 64 and cache.stats().num_entries == 2
    cache.put(key("f"), entry(16))  # larger than the whole budget: not kept, nothing evicted for it
    assert cache.get(key("f")) is None and cache.stats().num_entries == 2


def test_putting_a_key_again_replaces_it_without_counting_it_twice():
    cache = PromptCache(1024)
    cache.put(key("a"), entry(4))
    cache.put(key("a"), entry(4, 2.0))
    assert cache.stats().num_bytes == 64 and float(cache.get(key("a")).k[0, 0, 0, 0]) == 2.0


def test_forget_drops_a_cloned_voice_s_entries_only():
    cache = PromptCache(1024)
    cache.put(key("a", "voice"), entry(4))
    cache.put(key("b", "voice"), entry(4))
    cache.put(key("a"), entry(4))
    assert cache.forget("voice") == 2 and cache.forget("voice") == 0
    assert cache.stats().num_entries == 1 and cache.stats().num_bytes == 64


def test_a_zero_budget_is_no_cache():
    assert PromptCache.of_mib(0) is None and PromptCache.of_mib(1).budget_bytes == 1 << 20
    with pytest.raises(ValueError):
        PromptCache(0)


def test_a_speaker_digest_is_its_bytes():
    embedding = torch.randn(8)
    assert speaker_digest(embedding) == speaker_digest(embedding.clone())
    changed = embedding.clone()
    changed[3] = torch.nextafter(changed[3], torch.tensor(10.0))  # one ulp
    assert speaker_digest(changed) != speaker_digest(embedding)


def test_a_prefix_is_copied_into_a_pooled_row_and_back():
    cache = KVCache.allocate(2, 3, 1, 8, 2, torch.device("cpu"), torch.float32, pool_positions=32)
    cache.place(1, 13, 8)
    prefix = CachedPrefix(torch.randn(2, 5, 1, 2), torch.randn(2, 5, 1, 2))
    prefix.write(cache, 1)
    assert torch.equal(cache.k[:, 13:18], prefix.k) and torch.equal(cache.v[:, 13:18], prefix.v)
    assert cache.k[:, :13].abs().sum() == 0 and cache.k[:, 18:].abs().sum() == 0  # nothing else written
    back = CachedPrefix.read(cache, 1, 5)
    assert torch.equal(back.k, prefix.k) and torch.equal(back.v, prefix.v)


# ---- Qwen3-TTS: a cached prefix against the whole prompt ------------------------------------
@pytest.fixture(scope="module")
def custom_voice() -> Qwen3TTSLM:
    return Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny"), seed=0)


@pytest.fixture(scope="module")
def base() -> Qwen3TTSLM:
    return Qwen3TTSLM.from_config(preset_config("qwen3-tts-tiny-base"), seed=0)


def x_vector(lm: Qwen3TTSLM, seed: int = 0) -> VoiceReference:
    gen = torch.Generator().manual_seed(seed)
    return VoiceReference({"speaker_embedding": torch.randn(lm.config.talker.hidden_size, generator=gen)})


def in_context(lm: Qwen3TTSLM) -> VoiceReference:
    t, gen = lm.config.talker, torch.Generator().manual_seed(1)
    codes = torch.randint(0, t.codebook_size, (6, t.num_code_groups), generator=gen)
    return VoiceReference({**x_vector(lm).tensors, "ref_codes": codes}, "The quick brown fox.")


def prefill_and_decode(lm: Qwen3TTSLM, prompts: list, slots: list[int], num_frames: int = 4,
                       pooled: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prefill prompts[i] into slots[i] in turn, then decode -> (logits after prefill [B, V], hidden [B, H],
    codes [B, T, K]); seeded sampling."""
    needs = [lm.kv_positions_for(p.num_tokens, num_frames) for p in prompts]
    lm.allocate_slots(6, 128, kv_positions=sum(needs) + 5 * len(prompts) if pooled else None)
    start = 0
    for slot, need in reversed(list(zip(slots, needs))) if pooled else ():  # out of order, with gaps
        lm.place(slot, start, need)
        start += need + 5
    for slot, prompt in zip(slots, prompts):
        lm.prefill(slot, prompt)
    mem = lm._require_memory()
    logits, hidden = mem.logits[slots].clone(), mem.hidden[slots].clone()
    gens = [torch.Generator().manual_seed(100 + slot) for slot in slots]  # a row's draws follow its slot
    batch = DecodeBatch(slots, [SAMPLED] * len(slots), gens, [True] * len(slots))
    return logits, hidden, torch.stack([lm.decode(batch)[0] for _ in range(num_frames)], dim=1)


def assert_cached_equals_whole(lm: Qwen3TTSLM, make_prompt, pooled: bool = False) -> PromptCache:
    """A first request (a miss: the whole prompt, its prefix kept) and a second of another text (a hit) against
    the second alone without a cache: logits and hidden state within float32 rounding, codes equal."""
    first, second = make_prompt(TEXTS[1]), make_prompt(TEXTS[2])
    lm.prompt_cache = None
    expected = prefill_and_decode(lm, [second], [4], pooled=pooled)
    lm.prompt_cache = PromptCache(1 << 20)
    try:
        got = prefill_and_decode(lm, [first, second], [0, 4], pooled=pooled)
        stats = lm.prompt_cache.stats()
        assert (stats.hits, stats.misses, stats.num_entries) == (1, 1, 1)
        assert lm._states[4].position == second.num_tokens + 4  # the hit's prompt and its 4 frames
        torch.testing.assert_close(got[0][1:], expected[0], **TOLERANCE)
        torch.testing.assert_close(got[1][1:], expected[1], **TOLERANCE)
        assert torch.equal(got[2][1:], expected[2])
        return lm.prompt_cache
    finally:
        lm.prompt_cache = None


def test_a_preset_voice_s_cached_prefix_prefills_as_the_whole_prompt(custom_voice):
    prompt = custom_voice.encode_prompt(TEXTS[2], None)
    assert num_prefix_positions(custom_voice.config, prompt) == prompt.num_tokens - 1  # all but t0 + codec_bos
    assert_cached_equals_whole(custom_voice, lambda text: custom_voice.encode_prompt(text, None))


def test_with_instructions_and_a_language_the_prefix_holds_them(custom_voice):
    options = PromptOptions(language=custom_voice.languages[0], instructions=CALM)
    prompt = custom_voice.encode_prompt(TEXTS[2], None, options=options)
    plain = custom_voice.encode_prompt(TEXTS[2], None)
    assert prefix_key(custom_voice.config, prompt) != prefix_key(custom_voice.config, plain)
    assert num_prefix_positions(custom_voice.config, prompt) == prompt.num_tokens - 1
    assert_cached_equals_whole(custom_voice, lambda text: custom_voice.encode_prompt(text, None, options=options))


def test_a_text_first_prompt_shares_the_head_only(custom_voice):
    options = PromptOptions(is_text_first=True)
    assert_cached_equals_whole(custom_voice, lambda text: custom_voice.encode_prompt(text, None, options=options))


def test_an_x_vector_voice_s_cached_prefix_prefills_as_the_whole_prompt_in_a_pooled_cache(base):
    reference = x_vector(base)
    assert_cached_equals_whole(base, lambda text: base.encode_prompt(text, None, reference), pooled=True)


def test_an_in_context_prompt_shares_its_text_free_head(base):
    reference = in_context(base)
    prompt = base.encode_prompt(TEXTS[2], None, reference)
    head = num_prefix_positions(base.config, prompt)
    assert prompt.num_tokens - head == 1 + reference.tensors["ref_codes"].shape[0]  # codec_bos + the frames
    assert_cached_equals_whole(base, lambda text: base.encode_prompt(text, None, reference))


def test_a_streamed_text_prefills_its_cached_prefix(custom_voice):
    def streamed(text: str):
        feed = custom_voice.open_text(None)
        feed.append(text)
        return feed.prompt()
    assert_cached_equals_whole(custom_voice, streamed)


def test_another_speaker_embedding_misses_and_forgetting_a_voice_drops_its_prefix(base):
    one, other = x_vector(base, seed=0), x_vector(base, seed=1)
    base.prompt_cache = PromptCache(1 << 20)
    try:
        base.allocate_slots(4, 128)
        base.prefill(0, base.encode_prompt(TEXTS[0], None, one))
        base.prefill(1, base.encode_prompt(TEXTS[0], None, other))  # a changed voice never meets the first's KV
        assert (base.prompt_cache.stats().hits, base.prompt_cache.stats().misses) == (0, 2)
        assert base.forget_voice(VoiceReference(dict(one.tensors))) == 1
        base.prefill(2, base.encode_prompt(TEXTS[1], None, one))
        base.prefill(3, base.encode_prompt(TEXTS[1], None, other))
        assert (base.prompt_cache.stats().hits, base.prompt_cache.stats().misses) == (1, 3)
    finally:
        base.prompt_cache = None


def streamed_prompt(lm: Qwen3TTSLM, text: str):
    feed = lm.open_text(None)
    feed.append(text)
    return feed.prompt()


LAYOUTS = {  # name -> (the model's fixture, its prompt of a text)
    "preset": ("custom_voice", lambda lm, text: lm.encode_prompt(text, None)),
    "instructed": ("custom_voice", lambda lm, text: lm.encode_prompt(
        text, None, options=PromptOptions(language=lm.languages[0], instructions=CALM))),
    "text-first": ("custom_voice", lambda lm, text: lm.encode_prompt(
        text, None, options=PromptOptions(is_text_first=True))),
    "streamed": ("custom_voice", streamed_prompt),
    "x-vector": ("base", lambda lm, text: lm.encode_prompt(text, None, x_vector(lm))),
    "in-context": ("base", lambda lm, text: lm.encode_prompt(text, None, in_context(lm))),
}


def count_embedded_ids(lm: Qwen3TTSLM, monkeypatch) -> list[int]:
    """From now on, the number of ids of each call of the talker's text and codec embeddings."""
    counts = []
    for name in ("embed_text", "embed_codec"):
        def counted(ids, embed=getattr(lm.talker, name)):
            counts.append(ids.numel())
            return embed(ids)
        monkeypatch.setattr(lm.talker, name, counted)
    return counts


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_hit_builds_only_the_positions_after_its_cached_head(layout, request, monkeypatch):
    """The head's embeddings are not computed on a hit (each of its P positions embeds at least one id), and the
    positions the hit builds are the whole prompt's from P, bit for bit. P is counted by hand beside the head's
    embeddings (`num_prefix_positions`): they agree."""
    name, make_prompt = LAYOUTS[layout]
    lm = request.getfixturevalue(name)
    first, second = make_prompt(lm, TEXTS[1]), make_prompt(lm, TEXTS[2])
    num_head = num_prefix_positions(lm.config, second)
    assert prefix_embeddings(lm.config, lm.talker, second, lm.device)[0].shape[0] == num_head
    lm.allocate_slots(4, 128)
    counts = count_embedded_ids(lm, monkeypatch)
    whole, num_whole_ids = lm._prefill_part(1, second), sum(counts)
    lm.prompt_cache = PromptCache(1 << 20)
    try:
        lm.prefill(0, first)  # a miss: keeps the head
        counts.clear()
        hit = lm._prefill_part(1, second)
        assert lm.prompt_cache.stats().hits == 1
    finally:
        lm.prompt_cache = None
    assert hit.start == num_head and hit.embeds.shape[0] == second.num_tokens - num_head
    assert num_whole_ids - sum(counts) >= num_head
    assert torch.equal(hit.embeds, whole.embeds[num_head:]) and torch.equal(hit.trailing, whole.trailing)


def right_padded_at_starts(lm: Qwen3TTSLM, slots: list[int], prompts: list, length: int) -> None:
    """What a prefill graph computes, run eagerly: each prompt's own positions after its cached prefix, right-padded
    to `length`, plus a padding row (the graphs' `starts`)."""
    parts = [lm._prefill_part(slot, prompt) for slot, prompt in zip(slots, prompts)]
    batch = torch.randn(len(parts) + 1, length, lm.config.talker.hidden_size)  # garbage in the padding
    for i, part in enumerate(parts):
        batch[i, :part.embeds.shape[0]] = part.embeds
    lm._prefill_rows(batch, torch.tensor(slots + [lm._memory.scratch_row]),
                     torch.tensor([p.embeds.shape[0] - 1 for p in parts] + [0]),
                     torch.tensor([p.start for p in parts] + [0]))
    for slot, part, prompt in zip(slots, parts, prompts):
        lm._finish_prefill(slot, part, prompt)


def test_a_batch_of_hits_and_misses_right_padded_at_their_starts_equals_each_alone(custom_voice):
    lm, options = custom_voice, PromptOptions(instructions=CALM)
    prompts = [lm.encode_prompt(TEXTS[0], None), lm.encode_prompt(TEXTS[1], None, options=options),
               lm.encode_prompt(TEXTS[2], None)]
    lm.allocate_slots(6, 128)
    for slot, prompt in zip([4, 1, 2], prompts):
        lm.prefill(slot, prompt)
    expected = lm._memory.logits[[4, 1, 2]].clone()
    lm.prompt_cache = PromptCache(1 << 20)
    try:
        lm.prefill(5, lm.encode_prompt(TEXTS[3], None))  # the plain prefix is cached, the instructed one is not
        right_padded_at_starts(lm, [4, 1, 2], prompts, length=48)
        assert (lm.prompt_cache.stats().hits, lm.prompt_cache.stats().misses) == (2, 2)
        torch.testing.assert_close(lm._memory.logits[[4, 1, 2]], expected, **TOLERANCE)
    finally:
        lm.prompt_cache = None


# ---- CUDA ------------------------------------------------------------------------------------
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_prefill_graphs_with_cached_prefixes_give_the_whole_prompts_tokens(dtype):
    """On the GPU, through the prefill graphs (`prefill_batch`) and a pooled cache: hits (prefixes copied in, their own
    positions at a start) against the same prompts prefilled whole. float32: greedy tokens equal; bfloat16: a 1-row
    matmul rounds otherwise than a 9-row one, so logits are pinned by cosine, as the CUDA kernels are."""
    from tests.unit.lm_graph_helpers import assert_close
    from tests.unit.test_qwen3_tts_graphs import small_config

    lm = Qwen3TTSLM.from_config(small_config(), device="cuda", dtype=dtype, seed=0)
    slots = [3, 0, 5, 1]
    options = [PromptOptions(), PromptOptions(instructions=CALM), PromptOptions(), PromptOptions(instructions=CALM)]

    def run(cache: PromptCache | None) -> tuple[torch.Tensor, torch.Tensor]:
        lm.prompt_cache = cache
        lm.allocate_slots(8, 128, kv_positions=8 * 40)
        for i, slot in enumerate(slots + [2, 4]):
            lm.place(slot, 40 * (7 - i), 40)
        if cache is not None:  # warm the cache with other texts of the same voices
            lm.prefill_batch([2, 4], [lm.encode_prompt(TEXTS[0], None, options=o) for o in options[:2]])
        lm.prefill_batch(slots, [lm.encode_prompt(t, None, options=o) for t, o in zip(TEXTS, options)])
        logits = lm._memory.logits[slots].clone()
        gens = [torch.Generator(device="cuda").manual_seed(i) for i in range(4)]
        batch = DecodeBatch(slots, [SamplingParams(temperature=0.0)] * 4, gens, [True] * 4)
        return logits, torch.stack([lm.decode(batch)[0].cpu() for _ in range(4)], dim=1)

    whole = run(None)
    cached = run(PromptCache(64 << 20))
    assert lm.prompt_cache.stats().hits == 4 and lm._prefill_graphs._graphs
    lm.prompt_cache = None
    if dtype == torch.float32:
        torch.testing.assert_close(cached[0], whole[0], rtol=1e-4, atol=1e-4)
        assert torch.equal(cached[1], whole[1])
    else:
        assert_close(cached[0], whole[0])
