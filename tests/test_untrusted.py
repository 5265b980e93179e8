"""Withholding `Untrusted` text: every shape an output model can mark, generated."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Annotated, Any, Optional

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, create_model
from typing_extensions import TypedDict

from gateway.untrusted import WITHHELD, Untrusted, UntrustedText, has_untrusted_fields, withhold_untrusted
from tests.support.canaries import CANARY, TRUSTED_TEXT, planted
from tests.support.examples import examples

# A shape is a tuple: ("untrusted",), ("text",), ("number",), ("list", s), ("tuple", s), ("set", leaf),
# ("optional", s), ("dict", s), ("marked", s) (Annotated[s, UntrustedText()]), or a record of fields:
# ("model", (s, ...)), ("dataclass", (s, ...)) or ("typeddict", (s, ...)).
RECORDS = ("model", "dataclass", "typeddict")
LEAVES = st.sampled_from([("untrusted",), ("text",), ("number",)])


def _extend(children: st.SearchStrategy[tuple[Any, ...]]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.one_of(
        st.tuples(st.sampled_from(["list", "tuple", "optional", "dict", "marked"]), children),
        st.tuples(st.just("set"), st.sampled_from([("untrusted",), ("text",)])),
        st.tuples(st.sampled_from(RECORDS), st.lists(children, min_size=1, max_size=3).map(tuple)),
    )


SHAPES = st.tuples(st.just("model"), st.lists(st.recursive(LEAVES, _extend, max_leaves=8), min_size=1, max_size=4))
_names = itertools.count()


def _annotation(shape: tuple[Any, ...]) -> Any:
    kind = shape[0]
    if kind in ("untrusted", "text", "number"):
        return {"untrusted": Untrusted, "text": str, "number": int}[kind]
    if kind in RECORDS:
        types = {f"f{i}": _annotation(child) for i, child in enumerate(shape[1])}
        name = f"Generated{next(_names)}"
        if kind == "dataclass":
            return dataclasses.make_dataclass(name, list(types.items()), frozen=True)
        if kind == "typeddict":
            return TypedDict(name, types)  # type: ignore[operator]
        return create_model(name, **{field: (annotation, ...) for field, annotation in types.items()})
    inner = _annotation(shape[1])
    return {
        "list": lambda: list[inner],  # type: ignore[valid-type]
        "tuple": lambda: tuple[inner, ...],  # type: ignore[valid-type]
        "set": lambda: frozenset[inner],  # type: ignore[valid-type]
        "optional": lambda: Optional[inner],  # noqa: UP045 - the spelling under test, beside `X | None`
        "dict": lambda: dict[str, inner],  # type: ignore[valid-type]
        "marked": lambda: Annotated[inner, UntrustedText()],
    }[kind]()


def _value(draw: st.DrawFn, shape: tuple[Any, ...], tainted: bool = False) -> Any:
    """A JSON value of `shape`; every string that is untrusted (or under a marked shape) holds the canary."""
    kind = shape[0]
    if kind == "untrusted" or (kind == "text" and tainted):
        return draw(planted())
    if kind == "text":
        return draw(TRUSTED_TEXT)
    if kind == "number":
        return draw(st.integers(-5, 5))
    if kind in RECORDS:
        return {f"f{i}": _value(draw, child, tainted) for i, child in enumerate(shape[1])}
    child = shape[1]
    if kind == "optional":
        return None if draw(st.booleans()) else _value(draw, child, tainted)
    if kind == "dict":
        keys = draw(st.lists(TRUSTED_TEXT, max_size=3, unique=True))
        return {key: _value(draw, child, tainted) for key in keys}
    if kind == "marked":
        return _value(draw, child, True)
    return [_value(draw, child, tainted) for _ in range(draw(st.integers(0, 3)))]


def _mentions_untrusted(shape: tuple[Any, ...]) -> bool:
    if shape[0] in ("untrusted", "marked"):
        return True
    children = shape[1] if shape[0] in RECORDS else shape[1:]
    return any(_mentions_untrusted(child) for child in children if isinstance(child, tuple))


@st.composite
def models_and_answers(draw: st.DrawFn) -> tuple[tuple[Any, ...], type[BaseModel], BaseModel]:
    shape = draw(SHAPES)
    model = _annotation(shape)
    return shape, model, model.model_validate(_value(draw, shape))


@settings(database=None, deadline=None, max_examples=examples(300))
@given(models_and_answers())
def test_no_untrusted_string_of_any_shape_survives_withholding(generated: tuple[Any, type[BaseModel], Any]) -> None:
    """Lists, tuples, sets, optionals, dict values, marked containers and models inside any of them:
    after withholding, the canary planted in every untrusted string appears nowhere in the dump."""
    shape, model, answer = generated
    withheld = withhold_untrusted(answer)
    assert CANARY not in withheld.model_dump_json()
    assert CANARY not in repr(withheld)
    assert has_untrusted_fields(model) is _mentions_untrusted(shape)
    if not _mentions_untrusted(shape):
        assert withheld == answer


def test_withheld_strings_keep_their_place() -> None:
    """A list of untrusted strings keeps its length, each string replaced; trusted neighbours are kept."""

    class Note(BaseModel):
        tags: list[Untrusted]
        labels: dict[str, Untrusted | None]
        kind: str

    note = withhold_untrusted(Note(tags=["a", "b"], labels={"x": "y", "z": None}, kind="memo"))
    assert note == Note(tags=[WITHHELD, WITHHELD], labels={"x": WITHHELD, "z": None}, kind="memo")
