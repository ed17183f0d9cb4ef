"""tools/levers.py: each variant is the baseline with one lever changed, and only the router or a
codec lane reloads for it (the LM lane keeps running)."""
from dataclasses import replace

import pytest

from server.serve import ServeConfig
from tools.levers import OFF, models_to_reload, overrides


def test_a_variant_is_the_baseline_with_its_one_lever():
    assert overrides("baseline") == OFF
    assert overrides("urgent-budget") == {**OFF, "urgent_budget": 4}
    assert overrides("urgent_budget=2,margin_quantile=0.9") == {**OFF, "urgent_budget": 2, "margin_quantile": 0.9}
    with pytest.raises(ValueError):
        overrides("no_such_field=1")


def test_only_the_models_a_lever_touches_reload():
    base = ServeConfig(device="cuda", **OFF)
    assert models_to_reload(base, ServeConfig(device="cuda", **overrides("baseline"))) == []
    assert models_to_reload(base, ServeConfig(device="cuda", **overrides("mps-priority"))) == ["codec"]
    assert models_to_reload(base, ServeConfig(device="cuda", **overrides("margin-q95"))) == ["vox_ensemble"]
    for variant in ("codec-batch-16", "codec-delay-8ms"):  # the background lane's batcher: that lane alone
        assert models_to_reload(base, ServeConfig(device="cuda", **overrides(variant))) == ["codec"]
    # a variant after another starts from the baseline again: the earlier one's batch is undone
    batch16 = replace(base, **overrides("codec-batch-16"))
    baseline_again = replace(batch16, **overrides("baseline"))
    assert baseline_again.codec_max_batch == 32 and models_to_reload(batch16, baseline_again) == ["codec"]
    delay = replace(batch16, **overrides("codec-delay-8ms"))
    assert (delay.codec_max_batch, delay.codec_queue_delay_us) == (32, 8000)
    with pytest.raises(ValueError, match="LM lane"):
        models_to_reload(base, ServeConfig(device="cuda", lm_sm_pct=50, **OFF))
