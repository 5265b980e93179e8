"""`countersign cards ...`: list, show and decide approval cards from a terminal.

Who calls it: `gateway.cli`, with the admin its key stands for already resolved. Every command goes
through the same `CardService` as the admin API, against the store's ledger, and prints the same
views (`AdminCard`, `AdminCardSummary`); ``--json`` prints them as the API sends them. Card text can
come from an agent, so everything shown is escaped to one line (`_safe`) and the agent's own
words are fenced as untrusted.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gateway.audit import AuditSink
from gateway.card import CardState
from gateway.card_service import CardService
from gateway.card_views import AdminCard, CardActionResult, ResultCode
from gateway.principal import Principal
from gateway.printable import escape_unprintable
from gateway.store.durability import LedgerGuard
from gateway.store.ledger import RedisLedger

__all__ = ["COMMANDS", "run"]

COMMANDS = ("list", "show", "approve", "reject", "cancel", "resolve")


async def run(client: Any, audit: AuditSink, admin: Principal, args: argparse.Namespace) -> int:
    """Run one `cards` command as `admin`. Returns the exit status (0 done, 1 refused)."""
    guard = LedgerGuard(client)
    service = CardService(RedisLedger(client, on_verdict=guard.observe), audit, writable=guard.writable)
    command = args.cards_command
    if command == "list":
        state = CardState(args.state) if args.state else None
        # Every page, so no card is out of view; one more than --limit tells whether any were left out.
        wanted = None if args.limit is None else max(1, args.limit)
        items = await service.list(admin, state=state, tool=args.tool, requester=args.requester,
                                   limit=None if wanted is None else wanted + 1)  # fmt: skip
        if wanted is not None and len(items) > wanted:
            items = items[:wanted]
            print(f"countersign: more cards match; showing the newest {wanted} (raise --limit)", file=sys.stderr)
        for item in items:
            row = item.model_dump(mode="json")
            if args.json:
                print(json.dumps(row, sort_keys=True))
                continue
            approvals = f"{row['approvals']['received']}/{row['approvals']['required']}"
            fields = (row["card_id"], row["state"], row["tool"], row["requester"], approvals, row["created_at"])
            print("  ".join(_safe(value) for value in (*fields, row["summary"])))
        return 0
    if command == "show":
        view = await service.show(admin, args.card_id)
        if view is None:
            print("countersign: NOT_FOUND: no such card", file=sys.stderr)
            return 1
        shown = json.dumps(view.model_dump(mode="json"), indent=2, sort_keys=True)
        print(shown if args.json else "\n".join(_card_text(view)))
        return 0
    if command == "approve":
        result = await service.approve(
            admin, args.card_id, version=args.version, args_hash=args.args_hash, comment=args.comment
        )
    elif command == "reject":
        result = await service.reject(admin, args.card_id, reason=args.reason)
    elif command == "cancel":
        result = await service.cancel(admin, args.card_id)
    else:
        result = await service.resolve(admin, args.card_id, outcome=args.outcome, evidence=args.evidence)
    if result.code is ResultCode.LEDGER_UNAVAILABLE:
        print(f"countersign: ledger: {'; '.join(guard.problems)}", file=sys.stderr)
    return _report(result)


def _report(result: CardActionResult) -> int:
    view = result.card_view
    if result.ok:
        print(_safe(result.message))
    else:
        print(f"countersign: {result.code.value}: {_safe(result.message)}", file=sys.stderr)
    if view is not None:
        where = sys.stdout if result.ok else sys.stderr
        print(
            f"{view.card_id}  state={view.state.value}  decision={view.decision}  outcome={view.outcome}  "
            f"version={view.version}  args_hash={_safe(view.args_hash)}",
            file=where,
        )
    return 0 if result.ok else 1


def _safe(value: object) -> str:
    """One line with every unprintable character escaped (`gateway.printable`, as the audit tail does).

    Card text can come from an agent: it must not be able to drive the terminal (ANSI escapes),
    reorder what is shown (bidi overrides) or forge a line such as the end of the untrusted block.
    """
    return escape_unprintable(str(value))


def _provenance_text(view: AdminCard) -> list[str]:
    """What the requester read before proposing, shown first: taint, data flow, the reads, the flags."""
    provenance = view.provenance
    if provenance is None:
        return ["provenance  (not recorded for this card)"]
    lines = []
    if provenance.tainted:
        lines.append("TAINTED     proposed after a read of untrusted text: a stranger's words may have steered it")
    if provenance.data_flow:
        lines.append("DATA FLOW   text goes where other people see it, after a read of private data")
    lines.append(f"reads       {len(provenance.reads)} before the proposal, oldest first")
    for read in provenance.reads:
        marks = [mark for mark, on in (("untrusted text", read.untrusted_text), ("private", read.private)) if on]
        lines.append(f"  {read.at}  {_safe(read.tool)}" + (f"  [{', '.join(marks)}]" if marks else ""))
    lines.append(
        f"flags       {len(provenance.flags) or 'none'}"
        + (" (excerpts quote the agent: untrusted)" if provenance.flags else "")
    )
    lines += [f"  {_safe(flag.code)}  {_safe(flag.where)}: {_safe(flag.detail)}" for flag in provenance.flags]
    return lines


def _card_text(view: AdminCard) -> list[str]:
    approvals, requester = view.approvals, view.requester
    lines = [
        f"card        {view.card_id}",
        *_provenance_text(view),
        f"tool        {_safe(view.tool)} ({_safe(view.tool_version)})",
        f"state       {view.state.value}   decision={view.decision}   outcome={view.outcome}",
        f"version     {view.version}   args_hash={_safe(view.args_hash)}   (approve with both)",
        f"summary     {_safe(view.summary)}",
        f"requester   {_safe(requester.subject)}  (org {_safe(requester.org)}, key {requester.key_id})",
        f"approvals   {approvals.received}/{approvals.required} (role {_safe(approvals.role)})"
        + (f"  by {', '.join(_safe(a) for a in approvals.by)}" if approvals.by else ""),
        f"happened    {_safe(view.said)}",
        f"times       created {view.created_at}  "
        + (f"deadline {view.deadline}" if view.deadline else "no deadline running (the card is final)"),
    ]
    if view.preview is not None:
        lines.append("preview     (read from the backend at proposal; checked again before it runs)")
        lines += [f"  {_safe(line)}" for line in view.preview.lines]
    else:
        lines.append("preview     (this tool declares none)")
    if view.rejection is not None:
        lines.append(f"rejected    by {_safe(view.rejection.by)}: {_safe(view.rejection.reason)}")
    if view.reference or view.evidence:
        lines.append(
            f"result      reference={_safe(view.reference or '-')}  evidence={_safe(json.dumps(view.evidence))}"
        )
    lines.append("arguments (canonical; what will run)")
    lines += [f"  {_safe(line)}" for line in json.dumps(view.arguments, indent=2, sort_keys=True).splitlines()]
    agent_text = view.agent_text
    lines.append(f">>> UNTRUSTED agent text: {agent_text.note}")
    lines += [f"  | {_safe(name)}: {_safe(text)}" for name, text in sorted(agent_text.fields.items())] or ["  | (none)"]
    lines.append("<<< end of untrusted agent text")
    lines.append(f"history     ({'hash chain valid' if view.chain_valid else 'HASH CHAIN BROKEN: do not trust it'})")
    for event in view.events:
        detail = f"  {_safe(json.dumps(event.data, sort_keys=True))}" if event.data else ""
        lines.append(
            f"  {event.seq:>3}  {event.at}  {_safe(event.type)}  by {_safe(event.actor)}  "
            f"-> {event.state} v{event.version}{detail}"
        )
    return lines
