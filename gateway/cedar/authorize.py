"""Cedar's authorizer asked at the extension's own entry point: a request in, the outcome the engine reads out.

Why not ``cedarpy.is_authorized``: that wrapper wraps the request in a batch of one, parses Cedar's whole answer
with `json.loads` (its timing metrics included) and builds answer objects, and the engine reads three things of it:
allowed, the deciding policies, the errors. On a call Cedar must decide, that wrapping cost about a fifth of the
decision's instructions (bench/policy_cost.py). So this module calls the pinned ``cedarpy`` extension
(``cedarpy._internal``, the function the wrapper calls) and reads its answer directly; a reply it does not
recognise is read by `json.loads` instead, so a different answer text can cost time, never a wrong outcome.
tests/cedar/test_authorize.py checks both against ``cedarpy.is_authorized`` over generated policy sets and contexts.

The context goes over as JSON text: `context_text` writes the usual one (arguments that are strings, Longs or
booleans) directly, a few times cheaper than `json.dumps`, and anything else by `json.dumps`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii
from typing import Any, NamedTuple

import cedarpy
from cedarpy import _internal as extension

__all__ = ["Outcome", "authorize", "context_text", "entities"]


class Outcome(NamedTuple):
    """What the engine reads of Cedar's answer."""

    allowed: bool
    reasons: tuple[str, ...]
    """Cedar's ids of the deciding policies, sorted (Cedar reports them in no set order)."""
    errors: tuple[str, ...]
    """Cedar's messages for the policies it could not evaluate (it skips them), sorted."""


_ANSWER = re.compile(r'\{"decision":"(Allow|Deny)","correlation_id":null,"diagnostics":\{"reason":\[([^\]]*)\]')
"""The head of the extension's answer: the decision and the deciding policies' ids. The ids are Cedar's own
``policyN`` (the engine's policy sets are keyed by them), so the list holds no ``]``; the annotations that follow
may hold any text, but inside JSON strings, where a quote is always escaped."""
_NO_ERRORS = '"errors":[]'
"""Present exactly when the errors list is empty: a quote in any string of the answer is escaped."""
_ID = re.compile(r'"(policy\d+)"')


def entities(text: str) -> extension.Entities:
    """Cedar's parsed entities from their JSON text, in the form `authorize` takes.

    Raises:
        ValueError: Cedar refuses the entities.
    """
    return extension.Entities.from_json_str(text)


def authorize(request: dict[str, Any], policies: cedarpy.PolicySet, parsed: extension.Entities) -> Outcome:
    """Cedar's answer to `request` (principal, action and resource as ``{"type", "id"}``, the context as text from
    `context_text`) over `policies` and `parsed` entities (`entities`).

    Raises:
        ValueError: Cedar refuses the request itself (an entity or context it cannot parse).
    """
    answer = extension.is_authorized(request, policies, parsed)
    head = _ANSWER.match(answer)
    if head is not None and _NO_ERRORS in answer:
        ids = head.group(2)
        reasons = _ID.findall(ids)
        if len(reasons) == ids.count(",") + (1 if ids else 0):  # every id read: nothing unexpected in the list
            return Outcome(allowed=head.group(1) == "Allow", reasons=tuple(sorted(reasons)), errors=())
    return _read_whole(answer)


def _read_whole(answer: str) -> Outcome:
    """The outcome read from the whole answer parsed as JSON (what ``cedarpy.is_authorized`` reads)."""
    result = cedarpy.AuthzResult(json.loads(answer))
    return Outcome(
        allowed=result.allowed,
        reasons=tuple(sorted(result.diagnostics.reasons)),
        errors=tuple(sorted(str(error) for error in result.diagnostics.errors)),
    )


_PLAIN = frozenset({str, int, bool})


def context_text(context: Mapping[str, Any]) -> str:
    """`context` (``{"arguments": {...}}``, and ``"tainted"`` when present) as the JSON text Cedar parses.

    Arguments that are strings, Longs and booleans are written directly (strings escaped as `json.dumps` escapes
    them); a context holding anything else (a record, a set, a float) is written by `json.dumps`."""
    arguments = context["arguments"]
    if len(context) > 2 or not all(type(value) in _PLAIN for value in arguments.values()):
        return json.dumps(context)
    fields = []
    for name, value in arguments.items():
        kind = type(value)
        if kind is str:
            written = encode_basestring_ascii(value)
        elif kind is bool:
            written = "true" if value else "false"
        else:
            written = str(value)
        fields.append(f"{encode_basestring_ascii(name)}:{written}")
    text = '{"arguments":{' + ",".join(fields) + "}"
    if "tainted" in context:
        tainted = context["tainted"]
        if type(tainted) is not bool:
            return json.dumps(context)
        text += ',"tainted":true' if tainted else ',"tainted":false'
    elif len(context) > 1:
        return json.dumps(context)
    return text + "}"
