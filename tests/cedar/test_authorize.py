"""Cedar asked at the extension's entry point answers what ``cedarpy.is_authorized`` answers, and the context text
is the context.

`gateway.cedar.authorize` reads Cedar's answer without parsing it whole, and writes the usual context without
`json.dumps`; both are checked here against the public wrapper and `json.loads` over generated policy sets (with
annotations holding the texts its reading looks for), requests and contexts, errors included.
"""

from __future__ import annotations

import json
from typing import Any

import cedarpy
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.cedar.authorize import Outcome, authorize, context_text, entities
from tests.support.examples import examples

ENTITIES = [
    {"uid": {"type": "Principal", "id": "key_ann"}, "attrs": {}, "parents": [{"type": "Role", "id": "support"}]},
    {"uid": {"type": "Role", "id": "support"}, "attrs": {}, "parents": []},
    {"uid": {"type": "Tool", "id": "refund"}, "attrs": {}, "parents": []},
]
TRICKY = ['"errors":[]', '"reason":["policy9"]', "]", '"', "\\", "ü ☃ \u202e", ""]
"""Annotation texts that look like what `authorize` reads in Cedar's answer."""

_conditions = st.sampled_from(
    [
        "context.arguments.amount < 2000",
        "context.arguments.amount >= 2000",
        'context.arguments.order like "ord-1*"',
        'context.arguments.order == "ord-1001"',
        "context.arguments.amount * 4611686018427387904 > 0",  # overflows for most amounts: an error Cedar skips
        "context has tainted && context.tainted",
        "context.arguments.flag",  # not a boolean for every context: an error
        "true",
    ]
)
_policies = st.lists(
    st.tuples(
        st.sampled_from(["permit", "forbid"]),
        _conditions,
        st.sampled_from(TRICKY) | st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=8),
    ),
    min_size=0,
    max_size=6,
)
_values = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.text(max_size=10), st.booleans(), st.sampled_from(["ord-1001", "ord-17"])
)


def _policy_text(policies: list[tuple[str, str, str]]) -> str:
    return "\n".join(
        f"@note({_cedar_string(note)}) {effect} (principal, action, resource) when {{ {condition} }};"
        for effect, condition, note in policies
    )


def _cedar_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _public(request: dict[str, Any], policies: cedarpy.PolicySet) -> Outcome:
    result = cedarpy.is_authorized(request, policies, ENTITIES)
    errors = tuple(sorted(str(error) for error in result.diagnostics.errors))
    return Outcome(allowed=result.allowed, reasons=tuple(sorted(result.diagnostics.reasons)), errors=errors)


@settings(database=None, deadline=None, max_examples=examples(200))
@given(
    policies=_policies,
    arguments=st.dictionaries(st.sampled_from(["amount", "order", "flag"]), _values, max_size=3),
    tainted=st.none() | st.booleans(),
)
def test_the_answer_is_the_public_wrappers(
    policies: list[tuple[str, str, str]], arguments: dict[str, Any], tainted: bool | None
) -> None:
    context: dict[str, Any] = {"arguments": arguments}
    if tainted is not None:
        context["tainted"] = tainted
    parsed = cedarpy.PolicySet.from_str(_policy_text(policies))
    request = {
        "principal": {"type": "Principal", "id": "key_ann"},
        "action": {"type": "Action", "id": "refund"},
        "resource": {"type": "Tool", "id": "refund"},
        "context": context_text(context),
    }
    assert authorize(request, parsed, entities(json.dumps(ENTITIES))) == _public(request, parsed)


def test_an_answer_with_errors_is_read_whole() -> None:
    """A policy Cedar cannot evaluate is named in the errors (the engine refuses a call whose forbid errs)."""
    parsed = cedarpy.PolicySet.from_str(
        "forbid (principal, action, resource) when { context.arguments.amount * 4611686018427387904 > 0 };\n"
        "permit (principal, action, resource);"
    )
    request = {
        "principal": {"type": "Principal", "id": "key_ann"},
        "action": {"type": "Action", "id": "refund"},
        "resource": {"type": "Tool", "id": "refund"},
        "context": context_text({"arguments": {"amount": 5}}),
    }
    outcome = authorize(request, parsed, entities(json.dumps(ENTITIES)))
    assert outcome.allowed and outcome.reasons == ("policy1",)
    assert len(outcome.errors) == 1 and "policy0" in outcome.errors[0] and "overflow" in outcome.errors[0]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@settings(database=None, deadline=None, max_examples=examples(500))
@given(
    arguments=st.dictionaries(st.text(max_size=6), st.text() | st.integers() | st.booleans() | _json, max_size=4),
    tainted=st.none() | st.booleans(),
    extra=st.none() | st.just({"other": 1}),
)
def test_the_context_text_is_the_context(
    arguments: dict[str, Any], tainted: bool | None, extra: dict[str, Any] | None
) -> None:
    context: dict[str, Any] = {"arguments": arguments}
    if tainted is not None:
        context["tainted"] = tainted
    if extra is not None:
        context.update(extra)
    assert json.loads(context_text(context)) == context


def test_the_usual_answer_is_read_without_parsing_it_whole(monkeypatch: Any) -> None:
    """What the engine saves on a call Cedar decides: a cedarpy upgrade that changed its answer's text would
    still be read right (whole), but slower, and this says so."""

    def whole(answer: str) -> Outcome:
        raise AssertionError(f"read whole: {answer}")

    monkeypatch.setattr("gateway.cedar.authorize._read_whole", whole)
    parsed = cedarpy.PolicySet.from_str(
        '@id("x") permit (principal, action, resource) when { context.arguments.amount < 2000 };\n'
        '@reason("]") forbid (principal, action, resource) when { context has tainted && context.tainted };'
    )
    for tainted, allowed, reasons in ((False, True, ("policy0",)), (True, False, ("policy1",))):
        request = {
            "principal": {"type": "Principal", "id": "key_ann"},
            "action": {"type": "Action", "id": "refund"},
            "resource": {"type": "Tool", "id": "refund"},
            "context": context_text({"arguments": {"amount": 5}, "tainted": tainted}),
        }
        assert authorize(request, parsed, entities(json.dumps(ENTITIES))) == Outcome(allowed, reasons, ())
