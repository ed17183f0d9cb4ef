"""protocol.settings.read_settings: one reader for config.pbtxt parameters and JSON configs, by field type."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

import pytest

from protocol.settings import SettingsError, read_settings


class Layout(enum.Enum):
    POOLED = "pooled"
    STATIC = "static"


@dataclass(frozen=True)
class Inner:
    size: int = 2
    growth: float | None = 2.0


@dataclass(frozen=True)
class Settings:
    name: str = "tiny"
    count: int = 1
    ratio: float = 0.5
    is_on: bool = False
    layout: Layout = Layout.POOLED
    quantile: float | None = None
    window: int | None = None
    sizes: tuple[int, ...] = (1, 2)
    pair: tuple[int, str] = (0, "a")
    extra: dict = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"count must be >= 1, got {self.count}")


def test_absent_keys_keep_the_defaults():
    assert read_settings(Settings, {}) == Settings()


def test_parameter_strings_and_tritons_form_are_read_by_field_type():
    settings = read_settings(Settings, {
        "name": "big", "count": " 3 ", "ratio": {"string_value": "inf"}, "is_on": "True", "layout": "static",
        "quantile": "0.9", "window": "none", "sizes": "4, 8, 16", "pair": "2,b"})
    assert settings == Settings("big", 3, math.inf, True, Layout.STATIC, 0.9, None, (4, 8, 16), (2, "b"))


def test_json_values_are_read_by_field_type():
    settings = read_settings(Settings, {"count": 4, "ratio": 1, "is_on": True, "quantile": None, "sizes": [3],
                                        "extra": {"k": [1]}, "inner": {"size": 5, "growth": None}})
    assert settings == Settings(count=4, ratio=1.0, is_on=True, sizes=(3,), extra={"k": [1]},
                                inner=Inner(5, None))
    assert isinstance(settings.ratio, float) and isinstance(settings.sizes, tuple)


@pytest.mark.parametrize("key, value, expected", [
    ("count", "2.5", "setting 'count' must be an integer, got '2.5'"),
    ("count", 2.5, "setting 'count' must be an integer, got 2.5"),
    ("count", True, "setting 'count' must be an integer, got True"),
    ("ratio", "abc", "setting 'ratio' must be a number, got 'abc'"),
    ("is_on", "yes", "setting 'is_on' must be true or false, got 'yes'"),
    ("layout", "paged", "setting 'layout' must be one of pooled, static, got 'paged'"),
    ("quantile", "x", "setting 'quantile' must be a number or none, got 'x'"),
    ("name", 3, "setting 'name' must be a string, got 3"),
    ("pair", [1, "a", 2], "setting 'pair' must be a list, got [1, 'a', 2]"),
    ("layout", {"int64_value": 3}, "setting 'layout' must be one of pooled, static, got {'int64_value': 3}"),
    ("inner", {"size": "x"}, "setting 'inner' must be an object of Inner's fields"),
])
def test_a_value_that_does_not_fit_names_its_key(key, value, expected):
    with pytest.raises(SettingsError) as error:
        read_settings(Settings, {key: value})
    assert str(error.value).startswith(expected)


def test_unknown_keys_raise_unless_ignored():
    with pytest.raises(SettingsError, match=r"unknown setting keys \['colour'\]; known: \["):
        read_settings(Settings, {"colour": "red"})
    assert read_settings(Settings, {"colour": "red", "count": "2"}, ignore_unknown=True) == Settings(count=2)


def test_a_strings_none_is_its_own():
    @dataclass(frozen=True)
    class Voice:
        name: str | None = None
    assert read_settings(Voice, {"name": "none"}).name == "none"
    assert read_settings(Voice, {"name": None}).name is None


def test_keys_rename_and_name_the_fields_read():
    keys = {"count": "num_items", "ratio": "item_ratio"}
    assert read_settings(Settings, {"num_items": "5", "item_ratio": "0.25"}, keys=keys) == Settings(count=5,
                                                                                                    ratio=0.25)
    with pytest.raises(SettingsError, match="unknown"):
        read_settings(Settings, {"count": "5"}, keys=keys)  # under its own name it is no key of this reading


def test_given_fields_pass_as_built_and_their_keys_are_known():
    built = Inner(size=9)
    assert read_settings(Settings, {"inner": {"raw": 1}, "count": 2}, given={"inner": built}) == \
        Settings(count=2, inner=built)


def test_a_flattened_field_reads_its_fields_beside_the_outer_ones():
    settings = read_settings(Settings, {"count": "2", "size": "7"}, flatten=("inner",))
    assert settings == Settings(count=2, inner=Inner(size=7))
    assert read_settings(Settings, {"count": "2"}, flatten=("inner",)).inner == Inner()  # none given: its default


def test_with_what_every_error_says_what_was_read():
    with pytest.raises(ValueError, match=r"^lane parameter 'count' must be an integer"):
        read_settings(Settings, {"count": "x"}, what="lane parameter")
    with pytest.raises(ValueError, match=r"^bad lane parameter: count must be >= 1, got 0"):
        read_settings(Settings, {"count": "0"}, what="lane parameter")
    with pytest.raises(ValueError, match=r"^count must be >= 1"):  # without: the constructor's own error
        read_settings(Settings, {"count": "0"})
