"""The LM glue for a direct client (no router): its chunks and its ending on the Triton stream."""
from __future__ import annotations

import numpy as np

from protocol.reasons import EndReason
from protocol.wire import decode_error
from tests.middle.conftest import FakeEngine, chunk, lm_glue


def direct_request(pb, text: str = "Hello."):
    return pb.Request([pb.Tensor("text", np.array([text.encode()], dtype=np.object_))], request_id="r1")


def error_of(response):
    """The ending a response carries: a direct client's as a Triton error, the router's as the `error` output."""
    if response.has_error():
        return decode_error(response.error().message())
    tensor = next(t for t in response.output_tensors() if t.name() == "error")
    return decode_error(tensor.as_numpy()[0].decode())


def test_a_direct_stream_gets_its_chunks_then_a_plain_final_flag(pb):
    engine = FakeEngine()
    lm = lm_glue(engine)
    request = direct_request(pb)
    lm.execute([request])
    seq = engine.next_sequence()
    seq.sink.emit(chunk(0))
    engine.finish(seq.request_id, None)
    names = [[t.name() for t in r.output_tensors()] for r in request.sender.responses]
    assert names == [["tokens", "context_frames", "chunk_index", "start_frame", "is_last"]]
    assert request.sender.sent[-1] == (None, pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_a_failed_direct_stream_ends_with_an_error_response_coded_by_its_reason(pb):
    """A direct client's error is a Triton error (a 500 over HTTP for the server's failure, a 400 for its own bad
    input); the router's single response keeps the `error` output (see the chunk channel's test below)."""
    engine = FakeEngine()
    lm = lm_glue(engine)
    request = direct_request(pb)
    lm.execute([request])
    engine.finish(engine.next_sequence().request_id, "decode failed: boom")
    response = request.sender.responses[-1]
    ended = error_of(response)
    assert (ended.reason, ended.message) == (EndReason.INTERNAL, "decode failed: boom")
    assert response.error().code() == pb.TritonError.INTERNAL and request.sender.is_final.is_set()


def test_a_cancelled_direct_stream_ends_without_an_error(pb):
    engine = FakeEngine()
    lm = lm_glue(engine)
    request = direct_request(pb)
    lm.execute([request])
    lm.execute([pb.Request([pb.Tensor("cancel", np.array([True]))], request_id="r1")])
    assert engine.cancelled == ["r1"] and request.sender.responses == []
    assert request.sender.is_final.is_set()


def test_forget_voice_hands_the_deleted_voice_to_the_model_and_starts_nothing(pb):
    """The voice registry's delete: the model drops what it cached of the voice (its reference tensors)."""
    engine = FakeEngine()
    lm = lm_glue(engine)
    embedding = np.arange(8, dtype=np.float32)
    request = pb.Request([pb.Tensor("forget_voice", np.array([True])), pb.Tensor("speaker_embedding", embedding)],
                         request_id="")
    lm.execute([request])
    reference, = lm.model.forgotten
    np.testing.assert_array_equal(reference.tensors["speaker_embedding"].numpy(), embedding)
    assert request.sender.sent[-1] == (None, pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert engine.added.empty()


def test_an_lm_request_naming_an_unreachable_channel_is_refused_as_internal(pb):
    lm = lm_glue(FakeEngine())
    request = pb.Request([pb.Tensor("text", np.array([b"Hi."], dtype=np.object_))],
                         {"voxlane_channel": "voxlane-nobody", "voxlane_channel_key": "0" * 32})
    lm.execute([request])
    (response,) = request.sender.responses
    ended = error_of(response)
    assert ended.reason is EndReason.INTERNAL and "voxlane-nobody" in ended.message


def test_prompt_options_the_model_does_not_take_are_refused_by_name_before_any_work(pb):
    """The fake model takes no prompt options (as CSM, Orpheus, ...): a language it has not, instructions or a
    text-first prompt are refused as bad input naming the input; `auto` passes and changes nothing."""
    engine = FakeEngine()
    lm = lm_glue(engine)
    for name, value in (("language", np.array([b"French"], dtype=np.object_)),
                        ("instructions", np.array([b"Calm."], dtype=np.object_)),
                        ("non_streaming_mode", np.array([True]))):
        request = pb.Request([pb.Tensor("text", np.array([b"Hi."], dtype=np.object_)), pb.Tensor(name, value)],
                             request_id=name)
        lm.execute([request])
        ended = error_of(request.sender.responses[-1])
        assert (ended.reason, ended.param) == (EndReason.REFUSED_BAD_INPUT, name)
        assert request.sender.responses[-1].error().code() == pb.TritonError.INVALID_ARG  # a 400 over HTTP
    auto = pb.Request([pb.Tensor("text", np.array([b"Hi."], dtype=np.object_)),
                       pb.Tensor("language", np.array([b"Auto"], dtype=np.object_))], request_id="auto")
    lm.execute([auto])
    assert engine.next_sequence().request_id == "auto"


def test_a_parsed_request_is_the_routers_alone_a_direct_caller_sending_one_is_refused_by_name(pb):
    """`speech_request` skips the limits' checks, so only a request that names the router's chunk channel may
    carry one; a direct caller's is bad input naming it, and nothing reaches the engine."""
    engine = FakeEngine()
    lm = lm_glue(engine)
    forged = '{"text": "Hi.", "voice": null, "temperature": 0.9, "top_p": 1.0, "top_k": 50, ' \
             '"repetition_penalty": 1.0, "seed": 1, "max_audio_seconds": 100000.0, "ignore_eos": true}'
    request = pb.Request([pb.Tensor("speech_request", np.array([forged.encode()], dtype=np.object_))],
                         request_id="forged")
    lm.execute([request])
    ended = error_of(request.sender.responses[-1])
    assert (ended.reason, ended.param) == (EndReason.REFUSED_BAD_INPUT, "speech_request")
    assert engine.added.empty()


def test_list_voices_answers_the_model_s_preset_voices_and_starts_nothing(pb):
    """The voice registry's listing asks the LM lane (`list_voices`): one response, `voices` the names as JSON,
    with the final flag; no stream starts."""
    import json

    engine = FakeEngine()
    lm = lm_glue(engine)
    lm.model.voices = ("tiny", "tiny_b")
    request = pb.Request([pb.Tensor("list_voices", np.array([True]))], request_id="")
    lm.execute([request])
    (response,) = request.sender.responses
    assert json.loads(pb.get_output_tensor_by_name(response, "voices").as_numpy()[0]) == ["tiny", "tiny_b"]
    assert request.sender.is_final.is_set() and engine.added.empty()


def test_the_prompt_cache_s_counts_reach_the_metrics_as_counters_and_a_gauge(pb):
    """`voxlane_prompt_cache_*`: hits and misses are counters (each flush adds what came since), bytes a gauge."""
    import torch

    from backend_python.models.prompt_cache import CachedPrefix, PrefixKey, PromptCache
    from backend_python.stub_common.metrics import PromptCacheMetrics

    cache, key = PromptCache(1 << 20), PrefixKey(((1, 2), (3,)))
    metrics = PromptCacheMetrics(cache.stats)
    hits, misses, num_bytes = (family.metrics[0] for family in metrics._families)
    cache.get(key)
    cache.put(key, CachedPrefix(torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8)))
    metrics.flush()
    assert (hits.value, misses.value, num_bytes.value) == (0, 1, 512)
    cache.get(key), cache.get(key)
    metrics.flush()
    metrics.flush()  # nothing new: nothing added
    assert (hits.value, misses.value, num_bytes.value) == (2, 1, 512)
    assert [f.name for f in metrics._families] == ["voxlane_prompt_cache_hits_total",
                                                   "voxlane_prompt_cache_misses_total", "voxlane_prompt_cache_bytes"]
