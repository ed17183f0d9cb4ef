"""Reading a frozen settings dataclass from a mapping, by its fields' types: one reader for config.pbtxt
parameters (strings, or Triton's `{"string_value": ...}`) and JSON values (a checkpoint's config.json) alike.

A field's value is converted by its annotation: int, float, bool ("true"/"false" in a string), str, an enum (by
value), Optional (None, or "none" in a string, but a str field's "none" is its own), tuples and lists (JSON arrays,
or comma-separated in a string), dicts, and nested dataclasses (a JSON object, or, for a `flatten`ed field, its
fields beside the outer ones).
An absent key keeps the field's default. Torch- and numpy-free: the server and the clients both read with it.
"""
from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, Mapping, TypeVar

T = TypeVar("T")
NONE = "none"  # an Optional field's None, as a parameter string writes it
_TRITON_VALUE = "string_value"  # Triton's form of a parameter value: {"string_value": "..."}


def read_settings(cls: type[T], values: Mapping[str, Any], *, keys: Mapping[str, str] | None = None,
                  given: Mapping[str, Any] | None = None, flatten: tuple[str, ...] = (),
                  ignore_unknown: bool = False, what: str | None = None) -> T:
    """`cls` built from `values`, each field's value converted by the field's type.

    `keys`: field name -> the key it is read under, naming the fields read (default: every field under its own
    name); `given`: fields the caller built, passed as they are (their keys count as known); `flatten`: nested
    dataclass fields whose own fields stand among `values`' keys. A key that names nothing raises unless
    `ignore_unknown`. A value that does not fit its field raises ValueError naming the key; with `what` (say
    "lane parameter") every error, the constructor's checks too, reads "bad <what>: ...".
    """
    kwargs = _arguments(cls, values, keys, given or {}, flatten, ignore_unknown, what)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:
        if what is None or isinstance(error, SettingsError):
            raise
        raise SettingsError(f"bad {what}: {error}") from error


class SettingsError(ValueError):
    """A settings mapping that does not fit its dataclass; the message names the key."""


def _arguments(cls: type, values: Mapping[str, Any], keys: Mapping[str, str] | None, given: Mapping[str, Any],
               flatten: tuple[str, ...], ignore_unknown: bool, what: str | None) -> dict[str, Any]:
    hints = field_types(cls)
    keys = {name: name for name in hints if name not in given} if keys is None else dict(keys)
    nested = [name for name in flatten if keys.pop(name, None) is not None]
    known = set(keys.values()) | set(given) | {key for name in nested for key in field_types(hints[name])}
    unknown = sorted(set(values) - known)
    if unknown and not ignore_unknown:
        raise SettingsError(f"unknown {what or 'setting'} keys {unknown}; known: {sorted(known)}")
    kwargs = {name: convert(hints[name], values[key], key, what, ignore_unknown)
              for name, key in keys.items() if key in values}
    for name in nested:
        inner = {key: value for key, value in values.items() if key in field_types(hints[name])}
        if inner:
            kwargs[name] = read_settings(hints[name], inner, what=what)
    return {**kwargs, **given}


def field_types(cls: type) -> dict[str, Any]:
    """A dataclass's constructor fields and their types (annotations resolved in its module)."""
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):  # an annotation naming what its module imports lazily: read those as they are
        hints = {}
    return {name: hints.get(name, Any) for name in names}


def convert(kind: Any, raw: Any, key: str, what: str | None = None, ignore_unknown: bool = False) -> Any:
    """`raw` (a parameter string, Triton's form of one, or a JSON value) as a value of type `kind`; a nested
    dataclass's unknown keys raise unless `ignore_unknown`."""
    value = unwrap(raw)
    try:
        return _convert(kind, value, ignore_unknown)
    except (TypeError, ValueError) as error:
        reason = f" ({error})" if isinstance(error, SettingsError) else ""
        raise SettingsError(f"{what or 'setting'} {key!r} must be {describe(kind)}, got {value!r}{reason}") from None


def unwrap(raw: Any) -> Any:
    """Triton's `{"string_value": "..."}` as its string; any other value as it is."""
    if isinstance(raw, Mapping) and set(raw) == {_TRITON_VALUE}:
        return raw[_TRITON_VALUE]
    return raw


def _convert(kind: Any, value: Any, lenient: bool = False) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return _union(args, value, lenient)
    if kind in (Any, object) or isinstance(kind, TypeVar):
        return value
    if origin in (tuple, list):
        return _sequence(origin, args, value, lenient)
    if origin is not None:  # dict[str, X], Mapping[...]: JSON objects kept as they are
        return _plain(origin, value)
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return _dataclass(kind, value, lenient)
    return _scalar(kind, value)


def _union(args: tuple, value: Any, lenient: bool) -> Any:
    is_none_text = isinstance(value, str) and value.strip().lower() == NONE and str not in args  # "none": a str's own
    if type(None) in args and (value is None or is_none_text):
        return None
    for kind in (arg for arg in args if arg is not type(None)):
        try:
            return _convert(kind, value, lenient)
        except (TypeError, ValueError):
            continue
    raise ValueError(value)


def _sequence(origin: type, args: tuple, value: Any, lenient: bool) -> Any:
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",")] if value.strip() else []
    if not isinstance(value, (list, tuple)):
        raise TypeError(value)
    if not args or args[-1] is Ellipsis:
        items = [_convert(args[0] if args else Any, item, lenient) for item in value]
    elif len(args) == len(value):
        items = [_convert(kind, item, lenient) for kind, item in zip(args, value)]
    else:
        raise ValueError(value)
    return origin(items)


def _plain(origin: type, value: Any) -> Any:
    if origin in (dict, Mapping, typing.Mapping) and isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, origin):
        return value
    raise TypeError(value)


def _dataclass(kind: type, value: Any, lenient: bool) -> Any:
    if isinstance(value, kind):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(value)
    try:
        return read_settings(kind, value, ignore_unknown=lenient)
    except (TypeError, ValueError) as error:  # its own message, kept in the outer field's
        raise SettingsError(str(error)) from None


def _scalar(kind: Any, value: Any) -> Any:
    if isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool)):
        return float(value) if kind is float else value
    if kind is bool:
        return _bool(value)
    if kind is int:
        return int(_text(value))  # "2.5" is no integer, and neither is 2.5
    if kind is float:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else float(_text(value))
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(value.strip() if isinstance(value, str) else value)
    if kind is str:
        raise TypeError(value)
    return kind(value)


def _bool(value: Any) -> bool:
    text = _text(value).lower()
    if text not in ("true", "false"):
        raise ValueError(value)
    return text == "true"


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value.strip()


def describe(kind: Any) -> str:
    """What a value of type `kind` is, for an error: "an integer", "one of pooled, static", ..."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(arg) for arg in args)
    if origin in (tuple, list):
        return "a list"
    if dataclasses.is_dataclass(kind):
        return f"an object of {kind.__name__}'s fields"
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return f"one of {', '.join(str(member.value) for member in kind)}"
    return _DESCRIPTIONS.get(kind, getattr(kind, "__name__", str(kind)))


_DESCRIPTIONS = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
                 type(None): NONE, dict: "an object"}
