"""The `countersign` command line: serve, keys, audit, cards.

Every command acts on the data of the configured Redis, or of the embedded server of the data
directory (attaching to a running `serve`, or starting the server for the command's duration).
`cards` commands act as an admin, identified by an admin key (``--key`` or
``COUNTERSIGN_ADMIN_KEY``), through the same `CardService` as the admin API.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import sys
import unicodedata
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway import cli_adapters
from gateway.audit import AuditEvent
from gateway.card import CardState
from gateway.card_service import OUTCOMES, UNTRUSTED_NOTE, CardActionResult, CardService, CardView, ResultCode
from gateway.errors import GatewayError
from gateway.principal import KeyKind, Principal
from gateway.printable import escape_unprintable
from gateway.serve import redis_url_for, run, run_worker
from gateway.settings import Settings
from gateway.store.audit import RedisStreamAuditSink
from gateway.store.client import connect
from gateway.store.durability import LedgerGuard
from gateway.store.keys import KeyStore
from gateway.store.ledger import RedisLedger

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="countersign", description="An MCP gateway with human-approved writes.")
    parser.add_argument("--config", type=Path, help="TOML config file (adapters, backend URLs, orgs, roles)")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gateway (embedded Redis and demo backends by default)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--no-worker", action="store_true", help="run no approved-card worker in this process")
    commands.add_parser("worker", help="run an approved-card worker on its own (backends need configured URLs)")

    keys = commands.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", help="mint a key; it is printed once")
    create.add_argument("--kind", choices=[k.value for k in KeyKind], required=True)
    create.add_argument("--subject", required=True)
    create.add_argument("--org", required=True)
    create.add_argument("--roles", action="append", default=[], help="comma-separated; may repeat")
    create.add_argument("--json", action="store_true", help="print the key and its record as JSON")
    keys.add_parser("list", help="list keys (never the keys themselves)")
    revoke = keys.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("key_id")

    audit = commands.add_parser("audit", help="read the audit trail").add_subparsers(
        dest="audit_command", required=True
    )
    tail = audit.add_parser("tail", help="print the newest audit events")
    tail.add_argument("-n", type=int, default=20)
    tail.add_argument("-f", "--follow", action="store_true")
    tail.add_argument("--json", action="store_true")
    identity = _cards_parser(commands)
    cli_adapters.add_parser(commands, identity)
    return parser


def _cards_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    identity = argparse.ArgumentParser(add_help=False)
    identity.add_argument(
        "--key", help="an admin key (default: $COUNTERSIGN_ADMIN_KEY, preferred: argv is visible to other users)"
    )
    cards = commands.add_parser("cards", help="review and decide approval cards").add_subparsers(
        dest="cards_command", required=True
    )
    listing = cards.add_parser("list", parents=[identity], help="cards of your org, newest first")
    listing.add_argument("--state", choices=[state.value for state in CardState])
    listing.add_argument("--tool")
    listing.add_argument("--requester", help="the requesting agent's subject")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--json", action="store_true", help="one JSON object per card")
    show = cards.add_parser("show", parents=[identity], help="one card with its history")
    show.add_argument("card_id")
    show.add_argument("--json", action="store_true")
    approve = cards.add_parser("approve", parents=[identity], help="approve a card exactly as you reviewed it")
    approve.add_argument("card_id")
    approve.add_argument("--version", type=int, required=True, help="the version shown by `cards show`")
    approve.add_argument("--args-hash", required=True, help="the args_hash shown by `cards show`")
    approve.add_argument("--comment", default="")
    reject = cards.add_parser("reject", parents=[identity], help="veto a pending card")
    reject.add_argument("card_id")
    reject.add_argument("--reason", required=True)
    cancel = cards.add_parser("cancel", parents=[identity], help="cancel a pending or approved card")
    cancel.add_argument("card_id")
    resolve = cards.add_parser("resolve", parents=[identity], help="settle a NEEDS_RECONCILIATION card")
    resolve.add_argument("card_id")
    resolve.add_argument("--outcome", choices=OUTCOMES, required=True)
    resolve.add_argument(
        "--evidence", type=_json_object, required=True, help='a JSON object, e.g. \'{"ticket": "T-1"}\''
    )
    return identity


def _json_object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not valid JSON") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Entry point. Returns the process exit status (0 ok, 1 refused, 2 usage)."""
    args = _parser().parse_args(argv)
    try:
        settings = Settings.load(environ or {}, args.config)
        if args.command == "serve":
            settings = replace(
                settings,
                host=args.host or settings.host,
                port=args.port or settings.port,
                run_worker=settings.run_worker and not args.no_worker,
            )
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C before the server took over signals
                _run_fast(run(settings))
            return 0
        if args.command == "worker":
            with contextlib.suppress(KeyboardInterrupt):
                _run_fast(run_worker(settings))
            return 0
        if args.command == "adapters" and args.adapters_command == "import-openapi":
            return cli_adapters.import_openapi(args)
        if args.command in ("cards", "adapters"):
            args.key = args.key or (environ or {}).get("COUNTERSIGN_ADMIN_KEY", "")
        handler = _HANDLERS[(args.command, getattr(args, f"{args.command}_command"))]
        return asyncio.run(_with_store(settings, lambda store: handler(store, args)))
    except GatewayError as error:
        print(f"countersign: {error}", file=sys.stderr)
        return 1


def _run_fast(main: Coroutine[Any, Any, None]) -> None:
    """Run a long-lived coroutine on uvloop when it is installed (uvicorn[standard] brings it)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


class _Store:
    def __init__(self, settings: Settings, url: str) -> None:
        self.settings = settings
        self.connection = connect(url)
        self.redis = self.connection.client
        self.keys = KeyStore(self.redis)
        self.audit = RedisStreamAuditSink(self.redis)


async def _with_store(settings: Settings, action: Callable[[_Store], Awaitable[int]]) -> int:
    async with redis_url_for(settings, owner="cli") as url:
        store = _Store(settings, url)
        try:
            return await action(store)
        finally:
            await store.connection.aclose()


async def _keys_create(store: _Store, args: argparse.Namespace) -> int:
    roles = [role for chunk in args.roles for role in chunk.split(",") if role.strip()]
    known = store.settings.roles_of(args.org)
    org = escape_unprintable(args.org)
    if known is None:
        print(f"warning: org {org} is not configured; its keys will see no tools", file=sys.stderr)
    elif unknown := sorted(set(roles) - known):
        named = escape_unprintable(", ".join(unknown))
        print(f"warning: role(s) {named} are not configured for org {org}", file=sys.stderr)
    token, record = await store.keys.create(kind=KeyKind(args.kind), subject=args.subject, org=args.org, roles=roles)
    await store.audit.record(
        AuditEvent(
            action="key.create",
            outcome="ok",
            subject=record.subject,
            org=record.org,
            key_id=record.key_id,
            extra={"kind": record.kind.value, "roles": ",".join(sorted(record.roles)), "by": getpass.getuser()},
        )
    )
    if args.json:
        print(
            json.dumps(
                {
                    "key": token,
                    "key_id": record.key_id,
                    "kind": record.kind.value,
                    "subject": record.subject,
                    "org": record.org,
                    "roles": sorted(record.roles),
                }
            )
        )
    else:
        print(token)
        print(
            f"{record.key_id}  {record.kind.value}  {escape_unprintable(record.subject)}  "
            f"org={escape_unprintable(record.org)}  "
            f"roles={','.join(sorted(record.roles)) or '-'}  (shown once; only its hash is stored)",
            file=sys.stderr,
        )
    return 0


async def _keys_list(store: _Store, args: argparse.Namespace) -> int:
    for record in await store.keys.list():
        created = datetime.fromtimestamp(float(record.created_at), UTC).strftime("%Y-%m-%d %H:%M:%S")
        state = "revoked" if record.revoked else "active"
        roles = ",".join(sorted(record.roles)) or "-"
        kind = record.kind.value
        org, subject = escape_unprintable(record.org), escape_unprintable(record.subject)
        print(f"{record.key_id}  {kind:<7}  {state:<7}  {created}Z  {org:<10}  {subject}  {roles}")
    return 0


async def _keys_revoke(store: _Store, args: argparse.Namespace) -> int:
    record = await store.keys.revoke(args.key_id)
    await store.audit.record(
        AuditEvent(
            action="key.revoke",
            outcome="ok",
            subject=record.subject,
            org=record.org,
            key_id=record.key_id,
            extra={"by": getpass.getuser()},
        )
    )
    print(f"revoked {record.key_id} ({escape_unprintable(record.subject)})")
    return 0


def _format(event: AuditEvent, as_json: bool) -> str:
    """One line per event, whatever its fields hold: an agent named the tool, so every value is escaped.

    As JSON, `json.dumps` escapes every control character but DEL, which is escaped here.
    """
    if as_json:
        return json.dumps({"id": event.id, **event.to_fields()}, sort_keys=True).replace("\x7f", "\\u007f")
    millis = int(event.id.split("-")[0]) if event.id else 0
    when = datetime.fromtimestamp(millis / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    parts = [f"{when}Z", escape_unprintable(event.action), escape_unprintable(event.outcome)]
    parts += [
        f"{name}={escape_unprintable(value)}"
        for name, value in (
            ("subject", event.subject),
            ("org", event.org),
            ("tool", event.tool),
            ("code", event.code),
            ("key", event.key_id),
        )
        if value
    ]
    if event.latency_ms is not None:
        parts.append(f"{event.latency_ms:.1f}ms")
    if event.reason:
        parts.append(f"({escape_unprintable(event.reason)})")
    return "  ".join(parts)


async def _audit_tail(store: _Store, args: argparse.Namespace) -> int:
    events = await store.audit.recent(args.n)
    for event in events:
        print(_format(event, args.json), flush=True)
    if args.follow:
        last = events[-1].id if events else "$"
        while True:
            for event in await store.audit.after(last, block_ms=5000):
                print(_format(event, args.json), flush=True)
                last = event.id
    return 0


# -- cards ----------------------------------------------------------------------------------------


async def _cards(store: _Store, args: argparse.Namespace) -> int:
    admin = await _admin(store, args.key)
    if admin is None:
        return 1
    guard = LedgerGuard(store.redis)
    service = CardService(RedisLedger(store.redis), store.audit, writable=guard.writable)
    command = args.cards_command
    if command == "list":
        state = CardState(args.state) if args.state else None
        items = await service.list(admin, state=state, tool=args.tool, requester=args.requester, limit=args.limit)
        for item in items:
            row = item.to_json()
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
        print(json.dumps(view.to_json(), indent=2, sort_keys=True) if args.json else "\n".join(_card_text(view)))
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


async def _admin(store: _Store, token: str) -> Principal | None:
    """The admin the key stands for; otherwise say why on stderr (and audit a bad key) and return None."""
    if not token:
        print("countersign: this command needs an admin key: --key or COUNTERSIGN_ADMIN_KEY", file=sys.stderr)
        return None
    principal = await store.keys.resolve(token)
    if principal is not None and principal.kind is KeyKind.ADMIN:
        return principal
    reason = "unknown or revoked key" if principal is None else f"{principal.kind.value} key, not an admin key"
    await store.audit.record(
        AuditEvent(
            action="auth.reject",
            outcome="deny",
            code="UNAUTHENTICATED",
            reason=reason,
            key_id=principal.key_id if principal else "",
            extra={"surface": "cli"},
        )
    )
    print(f"countersign: not an admin: {reason}", file=sys.stderr)
    return None


def _report(result: CardActionResult) -> int:
    view = result.card_view
    if result.ok:
        print(_safe(result.message))
    else:
        print(f"countersign: {result.code.value}: {_safe(result.message)}", file=sys.stderr)
    if view is not None:
        card = view.card
        where = sys.stdout if result.ok else sys.stderr
        print(
            f"{card.card_id}  state={card.state.value}  decision={card.decision}  outcome={card.outcome}  "
            f"version={card.version}  args_hash={_safe(card.args_hash)}",
            file=where,
        )
    return 0 if result.ok else 1


def _safe(value: object) -> str:
    """One line with every control and format character escaped.

    Card text can come from an agent: it must not be able to drive the terminal (ANSI escapes),
    reorder what is shown (bidi overrides) or forge a line such as the end of the untrusted block.
    """
    return "".join(ch if unicodedata.category(ch)[0] != "C" else f"\\u{ord(ch):04x}" for ch in str(value))


def _card_text(view: CardView) -> list[str]:
    card, data = view.card, view.to_json()
    approvals = data["approvals"]
    lines = [
        f"card        {card.card_id}",
        f"tool        {_safe(card.tool)} ({_safe(card.tool_version)})",
        f"state       {card.state.value}   decision={card.decision}   outcome={card.outcome}",
        f"version     {card.version}   args_hash={_safe(card.args_hash)}   (approve with both)",
        f"summary     {_safe(card.summary)}",
        f"requester   {_safe(card.requester_subject)}  (org {_safe(card.requester_org)}, key {card.requester_key_id})",
        f"approvals   {approvals['received']}/{approvals['required']} (role {_safe(card.approver_role)})"
        + (f"  by {', '.join(_safe(a) for a in card.approvers)}" if card.approvers else ""),
        f"times       created {data['created_at']}  decide by {data['decide_by']}"
        + (f"  execute by {data['execute_by']}" if data["execute_by"] else ""),
    ]
    if card.rejection:
        lines.append(f"rejected    by {_safe(card.rejection.get('by', ''))}: {_safe(card.rejection.get('reason', ''))}")
    if card.reference or card.evidence:
        lines.append(
            f"result      reference={_safe(card.reference or '-')}  evidence={_safe(json.dumps(card.evidence))}"
        )
    lines.append("arguments (canonical; what will run)")
    lines += [f"  {_safe(line)}" for line in json.dumps(card.arguments, indent=2, sort_keys=True).splitlines()]
    lines.append(f">>> UNTRUSTED agent text: {UNTRUSTED_NOTE}")
    lines += [f"  | {_safe(name)}: {_safe(text)}" for name, text in sorted(card.agent_text.items())] or ["  | (none)"]
    lines.append("<<< end of untrusted agent text")
    lines.append(f"history     ({'hash chain valid' if view.chain_valid else 'HASH CHAIN BROKEN: do not trust it'})")
    for event in data["events"]:
        detail = f"  {_safe(json.dumps(event['data'], sort_keys=True))}" if event["data"] else ""
        lines.append(
            f"  {event['seq']:>3}  {event['at']}  {_safe(event['type'])}  by {_safe(event['actor'])}  "
            f"-> {event['state']} v{event['version']}{detail}"
        )
    return lines


async def _adapters(store: _Store, args: argparse.Namespace) -> int:
    admin = await _admin(store, args.key)
    if admin is None:
        return 1
    return await cli_adapters.run(
        store.redis, store.audit, admin, args, allowed=store.settings.registry_allowed_base_urls
    )


_HANDLERS: dict[tuple[str, str], Callable[[_Store, argparse.Namespace], Awaitable[int]]] = {
    ("adapters", "review"): _adapters,
    ("adapters", "accept"): _adapters,
    ("adapters", "remove"): _adapters,
    ("keys", "create"): _keys_create,
    ("keys", "list"): _keys_list,
    ("keys", "revoke"): _keys_revoke,
    ("audit", "tail"): _audit_tail,
    **{("cards", name): _cards for name in ("list", "show", "approve", "reject", "cancel", "resolve")},
}
