"""Hypothesis strategies for generated messages, built from each class's FIELDS metadata."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from protocol.schema import Field, Message, Struct

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def _scalar(type_: str) -> st.SearchStrategy[Any]:
    if type_ in _INTS:
        lo, hi = _INTS[type_]
        return st.integers(lo, hi)
    if type_ == "float64":
        return st.floats(allow_nan=False)
    if type_ == "bool":
        return st.booleans()
    if type_ == "uuid":
        return st.uuids()
    if type_ == "string":
        return st.text(max_size=12)
    if type_ in ("bytes", "records"):
        return st.binary(max_size=24)
    raise AssertionError(type_)


#: The values of one scalar field: the struct holding it, the field, its element type ("int32"
#: of "[]int32").
Scalars = Callable[[type[Struct], Field, str], st.SearchStrategy[Any]]


def any_scalar(owner: type[Struct], f: Field, type_: str) -> st.SearchStrategy[Any]:
    """Any value of `type_`, whatever the field."""
    return _scalar(type_)


def _value(
    owner: type[Struct], f: Field, version: int, flexible: bool, depth: int, scalars: Scalars
) -> st.SearchStrategy[Any]:
    element = f.type[2:] if f.type.startswith("[]") else f.type
    if f.struct is not None:
        one = instances(f.struct, version, flexible, depth + 1, scalars)
    else:
        one = scalars(owner, f, element)
    base = st.lists(one, max_size=3 if depth < 2 else 1) if f.type.startswith("[]") else one
    if f.nullable_in(version):
        base = st.none() | base
    return base


def unknown_tags() -> st.SearchStrategy[list[tuple[int, bytes]] | None]:
    """Unknown tagged fields, in ascending tag order as encoders write them."""
    tags = st.lists(st.integers(100, 10_000), max_size=2, unique=True).map(sorted)
    return st.none() | tags.flatmap(
        lambda ts: st.tuples(*[st.tuples(st.just(t), st.binary(max_size=6)) for t in ts]).map(
            lambda pairs: list(pairs) or None
        )
    )


def messages(
    cls: type[Message], version: int, scalars: Scalars = any_scalar
) -> st.SearchStrategy[Struct]:
    """Any valid instance of a top-level message at `version`, its scalars drawn from
    `scalars` (by default any value of their type)."""
    return instances(cls, version, cls.is_flexible(version), scalars=scalars)


def instances(
    cls: type[Struct],
    version: int,
    flexible: bool,
    depth: int = 0,
    scalars: Scalars = any_scalar,
) -> st.SearchStrategy[Struct]:
    """Any valid instance of `cls` at `version`: absent fields keep their defaults."""
    defaults = cls()
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in cls.FIELDS:
        if f.present_in(version):
            kwargs[f.name] = _value(cls, f, version, flexible, depth, scalars)
        else:
            kwargs[f.name] = st.just(getattr(defaults, f.name))
    if flexible:
        kwargs["unknown_tagged_fields"] = unknown_tags()
    return st.builds(cls, **kwargs)
