"""Output schemas of registered tools: every string is withheld from the model at any depth, marked or not,
unless the manifest shows it as untrusted (then it is fenced)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.outbound.backend_client import AiohttpUpstream
from gateway.principal import Principal
from gateway.registry.manifest import AdapterManifest
from gateway.registry.schema import input_model, output_model
from gateway.registry.tools import tools_from_manifest
from gateway.untrusted import FENCE_OPEN, WITHHELD, withhold_untrusted
from tests.support.canaries import CANARY, planted
from tests.support.examples import examples
from tests.support.executors import agent_path
from tests.support.planted import PlantedBackend

pytestmark = pytest.mark.anyio

ALICE = Principal(subject="alice@acme.example", org="acme", roles=frozenset({"staff"}), key_id="key_a")

# A node is ("string", marked), ("integer",), ("array", node) or ("object", ((name, node, required), ...)).
NAMES = st.from_regex(r"[a-z]{1,3}", fullmatch=True)


def _object(children: st.SearchStrategy[tuple[Any, ...]]) -> st.SearchStrategy[tuple[Any, ...]]:
    properties = st.lists(st.tuples(NAMES, children, st.booleans()), max_size=4, unique_by=lambda p: p[0])
    return st.tuples(st.just("object"), properties.map(tuple))


LEAVES = st.one_of(st.tuples(st.just("string"), st.booleans()), st.just(("integer",)))
NODES = st.recursive(LEAVES, lambda children: st.tuples(st.just("array"), children) | _object(children), max_leaves=10)
ROOTS = _object(NODES)


def _schema(node: tuple[Any, ...]) -> dict[str, Any]:
    if node[0] == "string":
        return {"type": "string"}
    if node[0] == "integer":
        return {"type": "integer"}
    if node[0] == "array":
        return {"type": "array", "items": _schema(node[1])}
    properties = {name: _schema(child) for name, child, _ in node[1]}
    return {"type": "object", "properties": properties, "required": [name for name, _, required in node[1] if required]}


def _marked_paths(node: tuple[Any, ...], path: str = "") -> Iterator[str]:
    """The paths as ``untrusted_output_fields`` spells them: ``notes[].tags[]``."""
    if node[0] == "string" and node[1]:
        yield path
    elif node[0] == "array":
        yield from _marked_paths(node[1], f"{path}[]")
    elif node[0] == "object":
        for name, child, _ in node[1]:
            yield from _marked_paths(child, f"{path}.{name}" if path else name)


def _answer(draw: st.DrawFn, node: tuple[Any, ...]) -> Any:
    if node[0] == "string":
        return draw(planted())  # marked or not: a plain string is a stranger's
    if node[0] == "integer":
        return draw(st.integers(0, 9))
    if node[0] == "array":
        return [_answer(draw, node[1]) for _ in range(draw(st.integers(0, 3)))]
    answer: dict[str, Any] = {}
    for name, child, required in node[1]:
        present = required or draw(st.sampled_from(["value", "null", "absent"]))
        if present == "null":
            answer[name] = None
        elif present != "absent":
            answer[name] = _answer(draw, child)
    return answer


@st.composite
def schemas_and_answers(draw: st.DrawFn) -> tuple[dict[str, Any], tuple[str, ...], Any]:
    root = draw(ROOTS)
    return _schema(root), tuple(_marked_paths(root)), _answer(draw, root)


@settings(database=None, deadline=None, max_examples=examples(300))
@given(schemas_and_answers())
def test_every_string_of_a_generated_output_schema_is_withheld_or_fenced(generated: Any) -> None:
    """Strings in objects, in lists of strings, in lists of lists and in objects inside lists, required or
    optional: whatever the manifest marks untrusted, none of its canaries survives `withhold_untrusted`; the
    same paths marked shown instead reach the model only inside a fence."""
    schema, marked, answer = generated
    model = output_model("notes_read", schema, untrusted=marked)
    assert CANARY not in withhold_untrusted(model.model_validate(answer)).model_dump_json()
    shown = output_model("notes_read", schema, shown=marked)
    strings = list(_strings(withhold_untrusted(shown.model_validate(answer)).model_dump(mode="json")))
    assert all(text in (WITHHELD, "") or (text.startswith(FENCE_OPEN) and CANARY in text) for text in strings)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _read_tool(schema: dict[str, Any], marked: tuple[str, ...], base_url: str) -> Any:
    manifest = AdapterManifest.model_validate(
        {
            "base_url": base_url,
            "signing_secret_env": "NOTES_SIGNING_KEY",
            "tools": [
                {
                    "name": "notes_read",
                    "description": "Read the notes.",
                    "mode": "read",
                    "method": "GET",
                    "path": "/notes",
                    "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
                    "output_schema": schema,
                    "access": {"public": True},
                    "untrusted_output_fields": list(marked),
                }
            ],
        }
    )
    [tool] = tools_from_manifest("notes", manifest)
    return tool


@settings(database=None, deadline=None, max_examples=examples(100))
@given(schemas_and_answers())
async def test_a_registered_tool_never_shows_the_model_a_marked_string(
    planted_backend: tuple[str, PlantedBackend], generated: Any
) -> None:
    """A tool built from a generated manifest, called against a real service answering with canaries in every
    string, marked or not: the envelope the model receives holds none, and neither does the audit."""
    schema, marked, answer = generated
    url, backend = planted_backend
    backend.plant(answer)
    client = AiohttpUpstream(url, service="notes")
    try:
        executor, audit = agent_path(_read_tool(schema, marked, url), clients={"notes": client})
        envelope = await executor.execute(ALICE, "notes_read", {})
    finally:
        await client.aclose()
    assert not envelope.is_error
    assert CANARY not in json.dumps(envelope.for_model(), ensure_ascii=False)
    assert all(CANARY not in json.dumps(event.to_fields()) for event in audit.events)


@pytest.mark.parametrize("name", ["json", "copy", "mro", "schema", "dict", "fields"])
def test_a_property_named_like_a_model_method_is_an_ordinary_field(name: str) -> None:
    """An API may name a field ``json`` or ``copy``: the input and output models hold it like any other,
    and building them warns of nothing (the suite turns warnings into errors)."""
    schema = {"type": "object", "properties": {name: {"type": "string"}}, "required": [name]}
    output = output_model("shadowing", schema)
    assert output.model_validate({name: "x"}).model_dump() == {name: "x"}
    arguments = input_model("shadowing", {**schema, "additionalProperties": False})
    assert arguments.model_validate({name: "y"}).model_dump() == {name: "y"}
