"""Marking third-party text in output models, and withholding it from the model's path.

A field annotated `Untrusted` holds text written by someone other than the caller and the
gateway (another person's booking title, a customer's note). The executor hands model
projections a copy of the output in which every such string is replaced by `WITHHELD`, so a
projection cannot leak the text even by mistake: it never receives it.

The mark works at any depth and in any shape an output model can declare: a field, an optional
field, the items of lists, tuples and sets, dict values (and dict keys), fields of models,
dataclasses and TypedDicts inside any of those. `Annotated[X, UntrustedText()]` marks a whole
container: every string anywhere inside it is withheld. A shape this module does not take apart
but that can hold marked text is withheld whole, every string in it, rather than passed through.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
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

_UNIONS = (Union, types.UnionType)
_COLLECTIONS = (list, tuple, set, frozenset, typing.Sequence, typing.AbstractSet, typing.MutableSequence)


def _marks(metadata: Any) -> bool:
    return any(isinstance(meta, UntrustedText) for meta in metadata)


def _hints(cls: Any) -> Mapping[str, Any] | None:
    """Field annotations of a dataclass, TypedDict or NamedTuple class; None for any other type."""
    if isinstance(cls, type) and (
        dataclasses.is_dataclass(cls)
        or (issubclass(cls, dict) and hasattr(cls, "__required_keys__"))  # typing's and typing_extensions' TypedDict
        or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
    ):
        return typing.get_type_hints(cls, include_extras=True)
    return None


def _mentions(annotation: Any, seen: frozenset[Any]) -> bool:
    """Whether a value of `annotation` can hold marked text, at any depth (models included)."""
    if get_origin(annotation) is Annotated:
        base, *metadata = get_args(annotation)
        return _marks(metadata) or _mentions(base, seen)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return False
        return any(_field_mentions(info, seen | {annotation}) for info in annotation.model_fields.values())
    hints = _hints(annotation)
    if hints is not None:
        return annotation not in seen and any(_mentions(hint, seen | {annotation}) for hint in hints.values())
    return any(_mentions(arg, seen) for arg in get_args(annotation))


def _field_mentions(info: Any, seen: frozenset[Any]) -> bool:
    return _marks(info.metadata) or _mentions(info.annotation, seen)


@cache
def _can_hold(annotation: Any) -> bool:
    return _mentions(annotation, frozenset())


def _holds_marked(annotation: Any) -> bool:
    try:
        return _can_hold(annotation)
    except TypeError:  # an unhashable annotation (metadata without __hash__): no cache
        return _mentions(annotation, frozenset())


Scrub = Callable[[Any], Any]
"""A value, as validated for one annotation, with the marked strings in it withheld."""


@cache
def _plan(model: type[BaseModel]) -> tuple[tuple[str, Scrub], ...]:
    """``(field name, its scrubber)`` of each field of `model` that can hold marked text.

    A field marked as a whole (``body: Untrusted``, where pydantic moves the mark into the field's
    metadata) gets its annotation wrapped again, so one walk handles both spellings.
    """
    plan: list[tuple[str, Scrub]] = []
    for name, info in model.model_fields.items():
        if _marks(info.metadata):
            plan.append((name, _scrubber(Annotated[info.annotation, UntrustedText()])))
        elif _holds_marked(info.annotation):
            plan.append((name, _scrubber(info.annotation)))
    return tuple(plan)


def has_untrusted_fields(model: type[BaseModel]) -> bool:
    """Whether `model`, or anything nested in it, can hold `Untrusted` text."""
    return _holds_marked(model)


def withhold_untrusted(instance: M) -> M:
    """A copy of `instance` with every `Untrusted` string, at any depth and in any shape, replaced by `WITHHELD`."""
    plan = _plan(type(instance))
    if not plan:
        return instance
    return instance.model_copy(update={name: scrub(getattr(instance, name)) for name, scrub in plan})


def _scrubber(annotation: Any) -> Scrub:
    """The scrubber of `annotation`, taken apart once: a read runs it on every answer."""
    try:
        return _cached_scrubber(annotation)
    except TypeError:  # an unhashable annotation (metadata without __hash__): no cache
        return _compile(annotation)


@cache
def _cached_scrubber(annotation: Any) -> Scrub:
    return _compile(annotation)


def _compile(annotation: Any) -> Scrub:
    """What withholding does to a value of `annotation`, decided by the annotation alone.

    Only the value's own shape is looked at per call: None stays None, a model is scrubbed by its own
    class's plan (`withhold_untrusted`), and a value of another shape than its annotation (one member
    of a union) is passed on as it is, for the member that describes it.
    """
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *metadata = get_args(annotation)
        inner = _withhold_all if _marks(metadata) else _scrubber(base)
        return lambda value: None if value is None else inner(value)
    shaped = _shaped(annotation, origin)
    return lambda value: (
        None if value is None else withhold_untrusted(value) if isinstance(value, BaseModel) else shaped(value)
    )


def _shaped(annotation: Any, origin: Any) -> Scrub:
    """The scrubber of `annotation` (not an `Annotated` one) for a value that is neither None nor a model."""
    if origin in _UNIONS:
        # Each member scrubs only what has its shape, and scrubbing only ever withholds more.
        members = tuple(_scrubber(member) for member in get_args(annotation))

        def union(value: Any) -> Any:
            for scrub in members:
                value = scrub(value)
            return value

        return union
    if not _holds_marked(annotation):
        return _unchanged
    args = get_args(annotation)
    hints = _hints(annotation)
    if hints is not None:
        # Taken apart when first used: a dataclass or TypedDict may name itself in its own fields.
        fields = {name: _Lazy(hint) for name, hint in hints.items()}
        anything = _Lazy(Any)

        def record(value: Any) -> Any:
            if isinstance(value, Mapping):  # a TypedDict
                return {key: fields.get(key, anything)(item) for key, item in value.items()}
            if dataclasses.is_dataclass(value):
                return _replaced(value, {name: scrub(getattr(value, name)) for name, scrub in fields.items()})
            return _withhold_all(value)  # a NamedTuple, or another shape of a value of this record's class

        return record
    if origin in (dict, typing.Mapping, typing.MutableMapping):
        key_type, item_type = args if len(args) == 2 else (Any, Any)
        marked_keys = _holds_marked(key_type)
        item_scrub = _scrubber(item_type)

        def mapping_of(value: Any) -> Any:
            if not isinstance(value, Mapping):
                return value  # another member of a union describes this value, and scrubs it
            return {
                (_withheld_key(index) if marked_keys else key): item_scrub(item)
                for index, (key, item) in enumerate(value.items())
            }

        return mapping_of
    if origin in _COLLECTIONS:
        if origin is tuple and args and args[-1] is not Ellipsis:
            positions = tuple(_scrubber(item_type) for item_type in args)

            def fixed_tuple(value: Any) -> Any:
                if not isinstance(value, list | tuple | set | frozenset):
                    return value  # as above
                return _rebuilt(value, [scrub(item) for scrub, item in zip(positions, value, strict=False)])

            return fixed_tuple
        item_scrub = _scrubber(args[0] if args else Any)

        def collection_of(value: Any) -> Any:
            if not isinstance(value, list | tuple | set | frozenset):
                return value  # as above
            return _rebuilt(value, [item_scrub(item) for item in value])

        return collection_of
    # A shape not taken apart here (a NamedTuple, an unusual generic) that can hold marked text.
    return _withhold_all


def _unchanged(value: Any) -> Any:
    return value


class _Lazy:
    """The scrubber of `annotation`, compiled on its first call."""

    __slots__ = ("_annotation", "_scrub")

    def __init__(self, annotation: Any) -> None:
        self._annotation = annotation
        self._scrub: Scrub | None = None

    def __call__(self, value: Any) -> Any:
        if self._scrub is None:
            self._scrub = _scrubber(self._annotation)
        return self._scrub(value)


def _withhold_all(value: Any) -> Any:
    """`value` with every string in it, at any depth, withheld (dict keys too)."""
    if isinstance(value, str):
        return WITHHELD
    if isinstance(value, BaseModel):
        names = [*type(value).model_fields, *(value.__pydantic_extra__ or {})]
        return value.model_copy(update={name: _withhold_all(getattr(value, name)) for name in names})
    if isinstance(value, Mapping):
        return {
            (_withheld_key(index) if isinstance(key, str) else key): _withhold_all(item)
            for index, (key, item) in enumerate(value.items())
        }
    if isinstance(value, list | tuple | set | frozenset):
        return _rebuilt(value, [_withhold_all(item) for item in value])
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return _replaced(value, {field.name: _withhold_all(getattr(value, field.name)) for field in fields})
    return value


def _withheld_key(index: int) -> str:
    """Third-party dict keys, withheld but still distinct."""
    return f"{WITHHELD} #{index + 1}"


def _rebuilt(value: Any, items: list[Any]) -> Any:
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple takes its fields positionally
        return type(value)(*items)
    return type(value)(items)


def _replaced(value: Any, updates: Mapping[str, Any]) -> Any:
    # Not dataclasses.replace: that re-runs validation, which a withheld string may not pass.
    clone = copy.copy(value)
    for name, item in updates.items():
        object.__setattr__(clone, name, item)
    return clone
