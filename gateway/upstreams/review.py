"""Review before exposure: what a person pins of an upstream tool, and which listed tools are served.

A tool's definition (name, description, input and output schemas, annotations) is hashed the way a
registered adapter's manifest is pinned. `sort_listing` serves a listed tool only when a review names it
and pins exactly its current hash; every other tool is quarantined, with the reason a reviewer reads
and the hash to pin once satisfied. Annotations are part of the hash (a changed hint is a changed
definition) and are shown as suggestions, never read as a classification.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.canonical import canonical_json
from gateway.config.upstreams import ToolReview

__all__ = ["Quarantined", "Sorted", "definition_diff", "definition_hash", "sort_listing"]

_PINNED_KEYS = ("name", "description", "inputSchema", "outputSchema", "annotations")


def _pinned(definition: Mapping[str, Any]) -> dict[str, Any]:
    return {key: definition[key] for key in _PINNED_KEYS if key in definition}


def definition_hash(definition: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of what a tool promises, as listed by its upstream."""
    return "sha256:" + hashlib.sha256(canonical_json(_pinned(definition)).encode()).hexdigest()


def definition_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """A unified diff of two definitions of one tool, for the reviewer (upstream text: show escaped)."""
    old = json.dumps(_pinned(before), indent=2, sort_keys=True).splitlines()
    new = json.dumps(_pinned(after), indent=2, sort_keys=True).splitlines()
    return list(difflib.unified_diff(old, new, "reviewed", "listed now", lineterm=""))


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A listed tool not served, and why."""

    name: str
    reason: str
    """``unreviewed``, ``changed`` (the pinned hash is not the listed one) or ``hidden``."""
    listed_hash: str
    """What a reviewer pins to accept the tool as listed now."""
    suggestion: Mapping[str, Any]
    """The upstream's own annotations (``readOnlyHint``...): a suggestion, never a classification."""


@dataclass(frozen=True, slots=True)
class Sorted:
    served: Mapping[str, tuple[Mapping[str, Any], ToolReview]]
    """Upstream tool name -> (its definition, its review), for tools reviewed read or write as listed."""
    quarantined: tuple[Quarantined, ...]


def sort_listing(listing: Sequence[Mapping[str, Any]], reviews: Mapping[str, ToolReview]) -> Sorted:
    """Which tools of `listing` are served under `reviews`, and which wait for a person."""
    served: dict[str, tuple[Mapping[str, Any], ToolReview]] = {}
    held: list[Quarantined] = []
    for definition in listing:
        name = str(definition.get("name", ""))
        listed = definition_hash(definition)
        review = reviews.get(name)
        reason = None
        if review is None:
            reason = "unreviewed"
        elif review.definition != listed:
            reason = "changed"
        elif review.mode == "hidden":
            reason = "hidden"
        if reason is None and review is not None:
            served[name] = (definition, review)
        else:
            hints = definition.get("annotations") or {}
            held.append(Quarantined(name=name, reason=reason or "", listed_hash=listed, suggestion=dict(hints)))
    return Sorted(served=served, quarantined=tuple(held))
