"""A tritonserver that exits before it is ready is reported with the models its log says could not load."""
from __future__ import annotations

from server.triton_launch import load_failures

LOG = (
    'I1206 06:10:42.003360 3814 pb_stub.cc:366] "Failed to initialize Python stub: ValueError: bad\\n\\nAt:\\n  x.py(8)"\n'
    "E1206 06:10:42.665907 3814 backend_model.cc:692] \"ERROR: Failed to create instance: ValueError: bad\\n\"\n"
    "E1206 06:10:42.666089 3814 model_lifecycle.cc:642] \"failed to load 'speechlm_lm' version 1: Internal: "
    "ValueError: num_attention_heads 4 not a multiple of num_key_value_heads 3\\n\\nAt:\\n  /x/config_checks.py(8): "
    "check_attention\\n\"\n"
    "E1206 06:10:42.7 3814 model_lifecycle.cc:642] \"failed to load 'codec' version 1: Invalid argument: no "
    "model.safetensors in /ckpt\"\n"
    "I1206 06:10:44.669347 3814 server.cc:345] \"Timeout 1: Found 0 live models\"\n"
)


def test_each_model_that_failed_to_load_is_named_with_its_reason():
    assert load_failures(LOG) == [
        "speechlm_lm failed to load: ValueError: num_attention_heads 4 not a multiple of num_key_value_heads 3",
        "codec failed to load: no model.safetensors in /ckpt",
    ]


def test_a_log_without_load_failures_names_none():
    assert load_failures('I1206 server.cc:674] "| codec | 1 | READY |"\nerror: creating server: bound\n') == []
