"""tools/levers.py: each variant is the baseline with one lever changed, and only the router or a
codec lane reloads for it (the LM lane keeps running)."""
import pytest

from clients.serve import ServeConfig
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
    with pytest.raises(ValueError, match="LM lane"):
        models_to_reload(base, ServeConfig(device="cuda", lm_sm_pct=50, **OFF))
