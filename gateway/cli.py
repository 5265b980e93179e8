"""The `countersign` command line: serve, keys, audit, cards.

Every command acts on the data of the configured Redis, or of the embedded server of the data
directory (attaching to a running `serve`, or starting the server for the command's duration).
`cards` (`gateway.cli_cards`) and `adapters` (`gateway.cli_adapters`) commands act as an admin,
identified by an admin key (``--key`` or ``COUNTERSIGN_ADMIN_KEY``), which this module resolves
(and audits when it is refused) before handing the admin to them.

``--config FILE`` goes before the command or after it (``countersign keys list --config f.toml``).
The mode follows from the configuration (`gateway.settings`: a file or a Redis URL is production,
where every command needs the audit secret); ``serve --demo`` asks for the demo whatever it says.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway import cli_adapters, cli_cards
from gateway.audit import AuditEvent
from gateway.audit_archive import AuditArchive
from gateway.audit_secret import audit_secret
from gateway.errors import GatewayError
from gateway.principal import KeyKind, Principal
from gateway.printable import escape_unprintable
from gateway.serve import redis_url_for, run, run_worker
from gateway.settings import Settings
from gateway.store.audit import RedisStreamAuditSink
from gateway.store.audit_trail import AuditTrail
from gateway.store.client import connect
from gateway.store.keys import KeyStore

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="countersign", description="An MCP gateway with human-approved writes.")
    parser.add_argument("--config", type=Path, help="TOML config file (adapters, backend URLs, orgs, roles)")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve", help="run the gateway: the demo with no config and no COUNTERSIGN_REDIS_URL, else production"
    )
    serve.add_argument(
        "--demo", action="store_true", help="demo mode whatever is configured: demo backends, demo keys printed"
    )
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
    audit.add_parser("verify", help="check the audit trail's hash chain, archive included (exit 1 on a break)")
    audit.add_parser("export", help="print the whole trail, archive and stream, one JSON object a line")
    identity = _identity()
    cli_cards.add_parser(commands, identity)
    cli_adapters.add_parser(commands, identity)
    _accept_config_everywhere(parser)
    return parser


def _accept_config_everywhere(parser: argparse.ArgumentParser) -> None:
    """Let every subcommand take ``--config`` too (``countersign serve --config f.toml``).

    Its default is SUPPRESS, so a subcommand without the option keeps the value given before the
    subcommand. argparse offers no public walk of its subparsers, hence `_actions`.
    """
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for sub in {id(p): p for p in action.choices.values()}.values():
            if not any("--config" in option.option_strings for option in sub._actions):
                sub.add_argument(
                    "--config",
                    type=Path,
                    default=argparse.SUPPRESS,
                    help="TOML config file (here or before the command)",
                )
            _accept_config_everywhere(sub)


def _identity() -> argparse.ArgumentParser:
    """The ``--key`` option every admin command (cards, adapters) takes."""
    identity = argparse.ArgumentParser(add_help=False)
    identity.add_argument(
        "--key", help="an admin key (default: $COUNTERSIGN_ADMIN_KEY, preferred: argv is visible to other users)"
    )
    return identity


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Entry point. Returns the process exit status (0 ok, 1 refused, 2 usage)."""
    args = _parser().parse_args(argv)
    try:
        settings = Settings.load(environ or {}, args.config, demo=getattr(args, "demo", False))
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
        self.connection = connect(
            url,
            connect_timeout=settings.redis_connect_timeout_seconds,
            timeout=settings.redis_timeout_seconds,
        )
        self.redis = self.connection.client
        self.keys = KeyStore(self.redis)
        self.secret = audit_secret(settings)
        self.audit = RedisStreamAuditSink(
            self.redis, secret=self.secret, blocking=self.connection.blocking, blocking_slack=self.connection.timeout
        )
        self.trail = AuditTrail(self.audit, AuditArchive(settings.archive_dir))


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
    events = await store.trail.recent(args.n)
    for event in events:
        print(_format(event, args.json), flush=True)
    if args.follow:
        last = events[-1].id if events else "$"
        while True:
            for event in await store.audit.after(last, block_ms=5000):
                print(_format(event, args.json), flush=True)
                last = event.id
    return 0


async def _audit_export(store: _Store, args: argparse.Namespace) -> int:
    async for entry_id, fields in store.trail.entries():
        print(_format(AuditEvent.from_fields(entry_id, fields), as_json=True))
    return 0


async def _audit_verify(store: _Store, args: argparse.Namespace) -> int:
    """Exit 0 when the chain holds from the first entry to the head Redis keeps; 1 naming the first break."""
    verdict = await store.trail.verify(store.secret)
    if verdict.broken is None:
        print(f"audit trail intact: {verdict.archived} archived and {verdict.live} live entries")
        return 0
    broken = verdict.broken
    print(
        f"countersign: audit trail broken at entry {escape_unprintable(broken.entry_id)} "
        f"(position {broken.position}, {escape_unprintable(verdict.where)}): {broken.reason}",
        file=sys.stderr,
    )
    return 1


# -- admin commands -------------------------------------------------------------------------------


async def _cards(store: _Store, args: argparse.Namespace) -> int:
    admin = await _admin(store, args.key)
    if admin is None:
        return 1
    return await cli_cards.run(store.redis, store.audit, admin, args)


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


async def _adapters(store: _Store, args: argparse.Namespace) -> int:
    admin = await _admin(store, args.key)
    if admin is None:
        return 1
    settings = store.settings
    return await cli_adapters.run(store.redis, store.audit, admin, args, allowed=settings.registry_allowed_base_urls,
                                  org_adapters=settings.org_adapters)  # fmt: skip


_HANDLERS: dict[tuple[str, str], Callable[[_Store, argparse.Namespace], Awaitable[int]]] = {
    ("adapters", "review"): _adapters,
    ("adapters", "accept"): _adapters,
    ("adapters", "remove"): _adapters,
    ("keys", "create"): _keys_create,
    ("keys", "list"): _keys_list,
    ("keys", "revoke"): _keys_revoke,
    ("audit", "tail"): _audit_tail,
    ("audit", "verify"): _audit_verify,
    ("audit", "export"): _audit_export,
    **{("cards", name): _cards for name in cli_cards.COMMANDS},
}
