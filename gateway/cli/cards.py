"""`countersign cards ...`: list, show and decide approval cards from a terminal.

Who calls it: `gateway.cli.main`, with the admin its key stands for already resolved. Every command goes
through the same `CardService` as the admin API, against the store's ledger, and prints the same
views (`AdminCard`, `AdminCardSummary`); ``--json`` prints them as the API sends them. Card text can
come from an agent, so everything shown is escaped to one line (`_safe`) and the agent's own
words are fenced as untrusted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, TextIO

from gateway.approvals.batch import BatchItem, decide_batch
from gateway.approvals.service import CardService
from gateway.approvals.watch import visible_to
from gateway.archives.card_archive import CardArchive
from gateway.audit.events import AuditEvent, AuditSink
from gateway.cards.card import CardState
from gateway.cards.views import AdminCard, CardActionResult, ResultCode
from gateway.config.approvals import PasskeyRequirement
from gateway.passkeys.service import PasskeyService
from gateway.principal import Principal
from gateway.printable import escape_unprintable
from gateway.store.audit_trail import AuditTrail
from gateway.store.durability import LedgerGuard
from gateway.store.ledger.codec import card_from_fields, event_from_fields
from gateway.store.ledger.redis_ledger import RedisLedger

__all__ = ["COMMANDS", "run"]

COMMANDS = ("list", "show", "archived", "approve", "reject", "cancel", "resolve")


async def run(
    client: Any,
    audit: AuditSink,
    admin: Principal,
    args: argparse.Namespace,
    *,
    passkeys: PasskeyService | None = None,
    require_passkey: PasskeyRequirement | None = None,
    batch_limit: int = 50,
    archive: CardArchive | None = None,
    trail: AuditTrail | None = None,
) -> int:
    """Run one `cards` command as `admin`. Returns the exit status (0 done, 1 refused). `archive` is
    where ``archived`` looks (the retired cards, `gateway.store.ledger.retention`), `trail` where its
    ``--verify`` looks for the audit entry of the removal."""
    guard = LedgerGuard(client)
    ledger = RedisLedger(client, on_verdict=guard.observe)
    service = CardService(
        ledger,
        audit,
        writable=guard.writable,
        changes=ledger.changes,
        batch_limit=batch_limit,
        passkeys=passkeys,
        require_passkey=require_passkey,
    )
    command = args.cards_command
    if command == "list":
        state = CardState(args.state) if args.state else None
        # Every page, so no card is out of view; one more than --limit tells whether any were left out.
        wanted = None if args.limit is None else max(1, args.limit)
        items = await service.list(
            admin, state=state, tool=args.tool, requester=args.requester, limit=None if wanted is None else wanted + 1
        )
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
    if command == "archived":
        return await _archived(archive, trail, audit, admin, args)
    if command in ("approve", "reject"):
        return await _decide(service, audit, admin, args, guard)
    if command == "cancel":
        result = await service.cancel(admin, args.card_id)
    else:
        result = await service.resolve(admin, args.card_id, outcome=args.outcome, evidence=args.evidence)
    return _report(result, guard)


async def _decide(
    service: CardService, audit: AuditSink, admin: Principal, args: argparse.Namespace, guard: LedgerGuard
) -> int:
    """approve or reject: on a terminal, show each card and decide exactly what was shown once the admin
    confirms; with --yes, decide the one card at the --version and --args-hash given, unseen (scripts)."""
    verb, ids, text = (
        args.cards_command,
        args.card_ids,
        args.comment if args.cards_command == "approve" else args.reason,
    )
    pinned = (args.version, args.args_hash) if args.version is not None and args.args_hash else None
    problem = ""
    if (args.version is None) != (args.args_hash is None):
        problem = "--version and --args-hash go together (both as `cards show` prints them)"
    elif pinned and len(ids) > 1:
        problem = "--version and --args-hash name one card's review; decide several cards on a terminal"
    elif args.yes and not pinned:
        problem = "--yes decides unseen: it needs --version and --args-hash, the ones you reviewed"
    elif not args.yes and not sys.stdin.isatty():
        problem = "no terminal to confirm on: run it on a terminal, or pass --yes with --version and --args-hash"
    if problem:
        return await _refuse(audit, admin, f"card.{verb}", ResultCode.VALIDATION_ERROR, problem)
    if args.yes and pinned:
        return _report(await _one(service, admin, verb, ids[0], *pinned, text), guard)
    views = []
    for card_id in ids:
        view = await service.show(admin, card_id)
        if view is None:
            return await _refuse(audit, admin, f"card.{verb}", ResultCode.NOT_FOUND, f"no such card: {card_id}")
        if pinned and pinned != (view.version, view.args_hash):
            message = f"the card changed since you reviewed it: it is now version {view.version}; review it again"
            return await _refuse(audit, admin, f"card.{verb}", ResultCode.CONFLICT, message)
        views.append(view)
        print("\n".join(_card_text(view, history=False)), end="\n\n")
    what = "this card" if len(views) == 1 else f"these {len(views)} cards"
    print(f"{verb.capitalize()} {what} exactly as shown above? Type yes to {verb}: ", end="", flush=True)
    answer = await asyncio.to_thread(sys.stdin.readline)
    if answer.strip().lower() not in ("y", "yes"):
        print("countersign: nothing was decided", file=sys.stderr)
        return 1
    if len(views) == 1:
        return _report(await _one(service, admin, verb, ids[0], views[0].version, views[0].args_hash, text), guard)
    items = [
        BatchItem(card_id=view.card_id, decision=verb, version=view.version, args_hash=view.args_hash, reason=text)
        for view in views
    ]
    outcome = await decide_batch(service, audit, admin, items)
    if not outcome.ok:
        print(f"countersign: {outcome.code.value}: {_safe(outcome.message)}", file=sys.stderr)
        return 1
    for view, result in zip(views, outcome.results, strict=True):
        now = result.card_view
        where = f"  state={now.state.value}  version={now.version}" if now is not None else ""
        print(f"{view.card_id}  {result.code.value}  {_safe(result.message)}{where}")
    print(_safe(outcome.message))
    return 0 if all(result.ok for result in outcome.results) else 1


async def _archived(
    archive: CardArchive | None, trail: AuditTrail | None, audit: AuditSink, admin: Principal, args: argparse.Namespace
) -> int:
    """``cards archived``: a card retention removed from Redis, as ``show`` prints it, from its newest archived
    copy. Scoped as ``show`` is: another org's card reads as no card, and that refusal is audited."""
    found = await asyncio.to_thread(archive.find, args.card_id) if archive is not None else None
    try:  # an archived copy is read back as the card it was; one that does not read is no card
        card = card_from_fields(found) if found is not None else None
        events = [event_from_fields(event) for event in found.get("events", ())] if found is not None else []
    except (KeyError, TypeError, ValueError):
        card = None
    if found is None or card is None or not visible_to(card, admin):
        return await _refuse(audit, admin, "card.show", ResultCode.NOT_FOUND, "no such archived card")
    view = AdminCard.from_card(card, events)
    shown = json.dumps(view.model_dump(mode="json"), indent=2, sort_keys=True)
    print(shown if args.json else "\n".join(["archived (no longer in Redis)", *_card_text(view)]))
    if not args.verify:
        return 0
    return await _vouched(trail, found, audit, admin, sys.stderr if args.json else sys.stdout)


async def _vouched(
    trail: AuditTrail | None, copy: dict[str, Any], audit: AuditSink, admin: Principal, said: TextIO
) -> int:
    """``archived --verify``: the newest ``card.archive`` audit entry of the card names the copy's version and
            chain head, or exit 1. A card's own chain is unkeyed; the trail is MAC-chained (`audit verify` checks
            that chain), so this is what tells a rewritten copy from the one removed. Reads the whole trail. Says
        so on `said` (stderr under ``--json``, whose stdout is the card alone); a copy it cannot vouch for is a
    refusal, audited (``card.verify``) like every other."""
    vouching = None
    if trail is not None:
        async for entry_id, fields in trail.entries():
            event = AuditEvent.from_fields(entry_id, fields)
            if event.action == "card.archive" and event.extra.get("card_id") == copy["card_id"]:
                vouching = event
    if vouching is None:
        return await _refuse(audit, admin, "card.verify", ResultCode.NOT_FOUND, "no card.archive audit entry names it")
    named = (vouching.extra.get("version"), vouching.extra.get("chain"))
    if named != (str(copy["version"]), copy["chain"]):
        message = (
            f"the archived copy (version {copy['version']}, chain head {copy['chain']}) is not the one "
            f"audit entry {vouching.id} vouches for (version {named[0]}, chain head {named[1]})"
        )
        return await _refuse(audit, admin, "card.verify", ResultCode.CONFLICT, message)
    print(f"audit entry {vouching.id} vouches for this copy: version {named[0]}, chain head {named[1]}", file=said)
    return 0


async def _one(
    service: CardService, admin: Principal, verb: str, card_id: str, version: int, args_hash: str, text: str
) -> CardActionResult:
    if verb == "approve":
        return await service.approve(admin, card_id, version=version, args_hash=args_hash, comment=text)
    return await service.reject(admin, card_id, reason=text, version=version, args_hash=args_hash)


async def _refuse(audit: AuditSink, admin: Principal, action: str, code: ResultCode, message: str) -> int:
    """A decision refused before it reached the card service: said on stderr, audited, exit 1."""
    await audit.record(AuditEvent.refusal(admin, action, code.value, message, {"surface": "cli"}))
    print(f"countersign: {code.value}: {_safe(message)}", file=sys.stderr)
    return 1


def _report(result: CardActionResult, guard: LedgerGuard) -> int:
    if result.code is ResultCode.LEDGER_UNAVAILABLE:
        print(f"countersign: ledger: {'; '.join(guard.problems)}", file=sys.stderr)
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
        lines.append("TAINTED     its requester was shown third-party text: a stranger's words may have steered it")
        if provenance.taint is not None:
            taint = provenance.taint
            until = "its MCP session ends" if taint.until_session_ends else _safe(taint.until)
            lines.append(f"  by {_safe(taint.tool)} at {_safe(taint.at)}; tainted until {until}")
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


def _card_text(view: AdminCard, *, history: bool = True) -> list[str]:
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
    if view.settlement is not None:
        settled = view.settlement
        lines.append(f"settled     by {settled.by.value}: {_safe(settled.said)}")
        if settled.saw:
            lines.append(f"  saw       {_safe(json.dumps(settled.saw, sort_keys=True))}  (backend text, for people)")
    # Every argument value was written by the agent: they are shown inside an untrusted block too.
    lines.append(">>> UNTRUSTED arguments, as the requesting agent wrote them (canonical: what will run)")
    lines += [f"  | {_safe(line)}" for line in json.dumps(view.arguments, indent=2, sort_keys=True).splitlines()]
    lines.append("<<< end of untrusted arguments")
    agent_text = view.agent_text
    lines.append(f">>> UNTRUSTED agent text: {agent_text.note}")
    lines += [f"  | {_safe(name)}: {_safe(text)}" for name, text in sorted(agent_text.fields.items())] or ["  | (none)"]
    lines.append("<<< end of untrusted agent text")
    lines.append(f"history     ({'hash chain valid' if view.chain_valid else 'HASH CHAIN BROKEN: do not trust it'})")
    for event in view.events if history else ():
        detail = f"  {_safe(json.dumps(event.data, sort_keys=True))}" if event.data else ""
        lines.append(
            f"  {event.seq:>3}  {event.at}  {_safe(event.type)}  by {_safe(event.actor)}  "
            f"-> {event.state} v{event.version}{detail}"
        )
    return lines
