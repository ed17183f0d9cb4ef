"""The wire protocol: torch-free, and its one wire form reads back what it wrote."""
from __future__ import annotations

import subprocess
import sys

import pytest

from protocol.quoting import quoted
from protocol.reasons import Ended, EndReason
from protocol.tensors import INPUT_NAMES, REQUEST_INPUTS, scalar_array
from protocol.wire import decode_error, encode_error


def test_protocol_imports_neither_torch_nor_triton():
    code = "import sys, protocol, protocol.tensors; print(sorted({'torch', 'tritonclient'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("ended", [
    Ended(EndReason.LANE_DOWN, "the codec lane is down: its process died"),
    Ended(EndReason.OVERLOADED, "server overloaded: 2 requests already wait; retry later"),
    Ended(EndReason.REFUSED_BAD_INPUT, "unknown voice 'x'; known voices: ['tiny']", "voice", "unknown_voice"),
    Ended(EndReason.REFUSED_BAD_INPUT, "input 'text' is empty or whitespace only", "text"),
    Ended(EndReason.INTERNAL, "[not a code] internal error: boom"),  # brackets inside the message stay text
    Ended(EndReason.CANCELLED, ""),
])
def test_every_ending_reads_back_from_its_wire_form(ended):
    assert decode_error(encode_error(ended)) == ended


def test_the_wire_form_is_a_bracketed_code():
    assert encode_error(Ended(EndReason.LANE_DOWN, "down")) == "[lane_down] down"
    assert encode_error(Ended(EndReason.REFUSED_BAD_INPUT, "bad", "top_p")) == "[bad_input param=top_p] bad"
    with pytest.raises(ValueError):
        encode_error(Ended(EndReason.REFUSED_BAD_INPUT, "bad", "two words"))


def test_a_message_without_a_known_code_is_tritons_own_refusal():
    for text in ("unexpected shape for input 'text' for model 'vox_ensemble'", "[nonsense] x"):
        assert decode_error(text) == Ended(EndReason.REFUSED_BAD_INPUT, text)


def test_only_overloaded_and_lane_down_are_worth_retrying_elsewhere():
    assert {r for r in EndReason if r.is_retryable_elsewhere} == {EndReason.OVERLOADED, EndReason.LANE_DOWN}
    assert {r for r in EndReason if not r.is_error} == {EndReason.DONE, EndReason.CANCELLED}


def test_the_tensor_table_names_every_input_once_with_its_array():
    assert INPUT_NAMES[0] == "text" and REQUEST_INPUTS["text"].is_required
    assert scalar_array("top_k", 5).dtype == REQUEST_INPUTS["top_k"].dtype
    assert scalar_array("voice", "tiny").tolist() == [b"tiny"]


@pytest.mark.parametrize("name, value", [("top_k", 4294967301), ("top_k", -(2 ** 31) - 1), ("seed", 2 ** 63)])
def test_an_integer_outside_its_dtype_is_an_error_never_a_wrap(name, value):
    with pytest.raises(ValueError, match=name):
        scalar_array(name, value)


def test_the_edges_of_an_integer_dtype_fit():
    assert scalar_array("seed", 2 ** 63 - 1)[0] == 2 ** 63 - 1 and scalar_array("top_k", 2 ** 31 - 1)[0] == 2 ** 31 - 1


def test_a_quote_of_a_long_value_is_short_and_says_its_length():
    assert quoted("tiny") == "'tiny'"
    long = quoted("v" * 10_000)
    assert len(long) < 110 and long.startswith("'vvv") and "10000 characters" in long


@pytest.mark.parametrize("text", [
    "Request for unknown model: 'vox_ensemble' is not found",
    "Request for unknown model: 'vox_ensemble' has no available versions",
    "Server not ready",
    "Stub process 'vox_ensemble_0_0' is not healthy.",  # the router's process died, not yet reloaded
    # a BLS call to a model while it loads again (a register while the encoder reloads answered 500 with it)
    "Model voice_encoder - Error when running inference: Failed for execute the inference request. "
    "Model 'voice_encoder' is not ready.",
])
def test_tritons_refusal_of_a_model_it_cannot_serve_now_is_lane_down(text):
    """A stopping server, or a model being unloaded: the request is fine, retry it elsewhere (503)."""
    ended = decode_error(text)
    assert ended.reason is EndReason.LANE_DOWN and text in ended.message


def test_a_request_refused_by_a_stopping_server_says_the_server_is_shutting_down():
    """After SIGTERM Triton's frontend refuses new requests on open streams (an ack among them)."""
    text = ("[request id: 1f] Server is stopping, scheduler for model has stopped accepting new "
            "inference requests")
    ended = decode_error(text)
    assert ended.reason is EndReason.LANE_DOWN and "shutting down" in ended.message and text in ended.message
