"""What an approver should know of a proposal's origin: taint, data flow, instruction-like words. Pure.

`assess` is called by the executor's agent path once per write proposal, with the requester's
remembered reads (`gateway.provenance.CallHistory`), the tool, the canonical arguments and the time.
It decides nothing about the card's fate: it returns the `Provenance` the card carries, and the
approval policy (`policies.approval.approvals_required`) may ask for more approvers when it is tainted.

* tainted: the requester's model may hold a stranger's words, so they may have steered the write. A
  read that showed third-party text (fenced, `gateway.untrusted.ShownUntrusted`) leaves a standing
  `Taint` that holds for `HistoryRules.taint_seconds` after it, whatever else was read since; text
  withheld from the model does not taint. The window of reads shown on the card has no say in it.
* data_flow: an argument the tool declares visible to other people (`Tool.visible_fields`: a booking
  title, an expense note) holds text, after a read of private data (`Tool.returns_private_data`). The
  agent may be carrying private data into a place others read.
* flags: every string the agent wrote in the arguments, read by the same detectors as a manifest's
  texts (`policies.text_safety`): instructions to the model or to the approver, hidden Unicode.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gateway.canonical import iso_from_ms
from gateway.provenance import (
    CallRecord,
    HistoryRules,
    Provenance,
    ProvenanceFlag,
    ProvenanceRead,
    ProvenanceTaint,
    Taint,
)
from gateway.tools.declarations import Tool
from policies.text_safety import review_texts

__all__ = ["DATA_FLOW", "assess", "argument_texts"]

DATA_FLOW = "data_flow"
"""The flag code of an argument that carries text where others see it after a private read."""


def assess(
    tool: Tool,
    arguments: Mapping[str, Any],
    history: Sequence[CallRecord],
    *,
    now_ms: int,
    rules: HistoryRules,
    taint: Taint | None = None,
    session_taint: Taint | None = None,
) -> Provenance:
    """The provenance of a proposal of `tool` with canonical `arguments`, made at `now_ms`, by a requester
    whose standing taint is `taint` (None: it has none).

    Tainted while `taint` holds (until its ``until_ms``; one dated after `now_ms` by a clock that moved
    back holds too), when a read in the window showed third-party text, or when the proposal comes from a
    2025-11-25 session that was shown some (`session_taint`, which holds as long as that session lives).
    The reads shown leave out those older than ``rules.window_seconds`` and those stamped after `now_ms` (a
    clock that moved back cannot date a read after the proposal it preceded).
    """
    since = now_ms - int(rules.window_seconds * 1000)
    reads = sorted((r for r in history if since <= r.at_ms <= now_ms), key=lambda r: r.at_ms)
    texts = list(argument_texts(arguments))
    flags = [
        ProvenanceFlag(code=flag.code.value, where=flag.field, detail=flag.excerpt)
        for flag in review_texts(texts, own_tool_names=frozenset(), other_tool_names=frozenset())
    ]
    private = [r.tool for r in reads if r.private]
    visible: list[str] = []  # only a private read makes a visible value a data flow: looked for then only
    if private:
        visible = [where for where, text in texts if text.strip() and _field_of(where) in tool.visible_fields]
        detail = f"shown to other people, after private data from {', '.join(sorted(set(private)))}"
        flags += [ProvenanceFlag(code=DATA_FLOW, where=where, detail=detail) for where in visible]
    standing = taint if taint is not None and now_ms < taint.until_ms else None
    shown = [r for r in reads if r.untrusted_text]
    if standing is None and shown:  # the read's own record, where the store lost the taint beside it
        latest = Taint.of(shown[-1], rules)
        standing = latest if now_ms < latest.until_ms else None
    by_session = standing is None and session_taint is not None
    if by_session:
        standing = session_taint
    return Provenance(
        tainted=standing is not None,
        taint=None
        if standing is None
        else ProvenanceTaint(
            tool=standing.tool,
            at=iso_from_ms(standing.at_ms),
            until=iso_from_ms(standing.until_ms),
            until_session_ends=by_session,
        ),
        data_flow=bool(visible),
        reads=[
            ProvenanceRead(tool=r.tool, at=iso_from_ms(r.at_ms), untrusted_text=r.untrusted_text, private=r.private)
            for r in reads
        ],
        flags=flags,
    )


def argument_texts(arguments: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Every string in `arguments`, at any depth, with its place: ``arguments.title``, ``arguments.items[0].note``."""
    yield from _texts("arguments", arguments)


def _field_of(where: str) -> str:
    """The top-level argument a place is in: ``arguments.items[0].note`` is in ``items``."""
    return re.split(r"[.\[]", where.removeprefix("arguments."), maxsplit=1)[0]


def _texts(where: str, value: Any) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _texts(f"{where}.{key}", item)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _texts(f"{where}[{index}]", item)
