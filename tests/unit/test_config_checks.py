"""Every family's decoder config refuses an attention shape its stack cannot run, with the same message."""
from __future__ import annotations

import dataclasses

import pytest

from backend_python.models.cosyvoice3.presets import tiny as cosyvoice3_tiny
from backend_python.models.csm.presets import tiny as csm_tiny
from backend_python.models.flashtts.presets import tiny as flashtts_tiny
from backend_python.models.higgs_v3.presets import tiny as higgs_tiny
from backend_python.models.layers.config_checks import check_attention
from backend_python.models.orpheus.presets import tiny as orpheus_tiny
from backend_python.models.qwen3_tts.presets import tiny as qwen3_tiny
from backend_python.models.tontaube.presets import tiny as tontaube_tiny
from backend_python.models.tse.presets import tiny as tse_tiny
from backend_python.models.voxtral.presets import tiny as voxtral_tiny
from backend_python.models.zonos.presets import tiny as zonos_tiny

HEAD_FIELDS = (("num_attention_heads", "num_key_value_heads"), ("n_heads", "n_kv_heads"), ("num_heads", "num_heads_kv"))


def attention_configs(config, seen=None) -> list:
    """The dataclass instances in `config` (itself included) that carry a query and a KV head count."""
    seen = set() if seen is None else seen
    if not dataclasses.is_dataclass(config) or id(config) in seen:
        return []
    seen.add(id(config))
    found = [config] if any(hasattr(config, heads) for heads, _ in HEAD_FIELDS) else []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        for item in value if isinstance(value, (list, tuple)) else (value,):
            found += attention_configs(item, seen)
    return found


FAMILY_CONFIGS = {"qwen3-tts": qwen3_tiny, "csm": csm_tiny, "higgs-v3": higgs_tiny, "orpheus": orpheus_tiny,
                  "zonos": zonos_tiny, "voxtral": voxtral_tiny, "tse": tse_tiny, "tontaube": tontaube_tiny,
                  "cosyvoice3": cosyvoice3_tiny, "flashtts": flashtts_tiny}


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIGS))
def test_a_kv_head_count_that_does_not_divide_the_heads_is_refused(family):
    configs = attention_configs(FAMILY_CONFIGS[family]())
    assert configs, f"no attention config found in {family}'s"
    for config in configs:
        heads_field, kv_field = next((h, kv) for h, kv in HEAD_FIELDS if hasattr(config, h))
        heads = getattr(config, heads_field)
        with pytest.raises(ValueError, match=f"num_attention_heads {heads} not a multiple of num_key_value_heads"):
            dataclasses.replace(config, **{kv_field: heads + 1})


def test_an_odd_head_size_is_refused_where_rope_turns_it():
    check_attention(8, 2, 64)
    check_attention(8, 2, 63, rope=False)
    with pytest.raises(ValueError, match="head_dim must be even for RoPE, got 63"):
        check_attention(8, 2, 63)
