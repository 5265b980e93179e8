"""Marking third-party text in output models, and withholding it from the model's path.

A field annotated `Untrusted` holds text written by someone other than the caller and the
gateway (another person's booking title, a customer's note). The executor hands model
projections a copy of the output in which every such field is replaced by `WITHHELD`, so a
projection cannot leak the text even by mistake: it never receives it.
"""

from __future__ import annotations

import types
import typing
from functools import cache
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel

__all__ = ["WITHHELD", "Untrusted", "UntrustedText", "has_untrusted_fields", "withhold_untrusted"]

M = TypeVar("M", bound=BaseModel)

WITHHELD = "[withheld: third-party text]"
"""What the model sees in place of untrusted text."""


class UntrustedText:
    """Metadata marker for `Untrusted`; compare with `isinstance`."""

    def __repr__(self) -> str:
        return "UntrustedText()"


Untrusted = Annotated[str, UntrustedText()]
"""A string written by a third party. Reaches people only, never the model."""


def _nested_models(annotation: Any) -> tuple[type[BaseModel], ...]:
    """BaseModel classes reachable through an annotation (``list[Booking]``, ``Booking | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return (annotation,)
    origin = get_origin(annotation)
    if origin is None:
        return ()
    if origin is Annotated:
        return _nested_models(get_args(annotation)[0])
    if origin in (Union, types.UnionType, list, tuple, set, frozenset, typing.Sequence) or origin is dict:
        found: tuple[type[BaseModel], ...] = ()
        for arg in get_args(annotation):
            found += _nested_models(arg)
        return found
    return ()


def _is_untrusted(annotation: Any, metadata: list[Any]) -> bool:
    """Whether a field is `Untrusted`, also when optional (``Untrusted | None`` hides the marker)."""
    if any(isinstance(meta, UntrustedText) for meta in metadata):
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return any(isinstance(meta, UntrustedText) for meta in get_args(annotation)[1:])
    if origin in (Union, types.UnionType):
        return any(_is_untrusted(arg, []) for arg in get_args(annotation))
    return False


@cache
def _plan(model: type[BaseModel]) -> tuple[frozenset[str], frozenset[str]]:
    """(untrusted field names, field names that may hold nested models) of one model class."""
    untrusted = set()
    nested = set()
    for name, info in model.model_fields.items():
        if _is_untrusted(info.annotation, info.metadata):
            untrusted.add(name)
        elif _nested_models(info.annotation):
            nested.add(name)
    return frozenset(untrusted), frozenset(nested)


def has_untrusted_fields(model: type[BaseModel], _seen: frozenset[type[BaseModel]] = frozenset()) -> bool:
    """Whether `model`, or any model nested in it, has an `Untrusted` field."""
    if model in _seen:
        return False
    untrusted, nested = _plan(model)
    if untrusted:
        return True
    seen = _seen | {model}
    return any(
        has_untrusted_fields(inner, seen)
        for name in nested
        for inner in _nested_models(model.model_fields[name].annotation)
    )


def _withhold_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return withhold_untrusted(value)
    if isinstance(value, list | tuple):
        return type(value)(_withhold_value(item) for item in value)
    if isinstance(value, dict):
        return {key: _withhold_value(item) for key, item in value.items()}
    return value


def withhold_untrusted(instance: M) -> M:
    """A copy of `instance` with every `Untrusted` string, at any depth, replaced by `WITHHELD`."""
    untrusted, nested = _plan(type(instance))
    if not untrusted and not nested:
        return instance
    updates: dict[str, Any] = {}
    for name in untrusted:
        if getattr(instance, name) is not None:
            updates[name] = WITHHELD
    for name in nested:
        updates[name] = _withhold_value(getattr(instance, name))
    return instance.model_copy(update=updates)
