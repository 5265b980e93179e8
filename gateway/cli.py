"""The `countersign` command line: serve, keys, audit.

Every command acts on the data of the configured Redis, or of the embedded server of the data
directory (attaching to a running `serve`, or starting the server for the command's duration).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from gateway.app import redis_client
from gateway.audit import AuditEvent, RedisStreamAuditSink
from gateway.errors import GatewayError
from gateway.keys import KeyStore
from gateway.principal import KeyKind
from gateway.serve import redis_url_for, run
from gateway.settings import Settings

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="countersign", description="An MCP gateway with human-approved writes.")
    parser.add_argument("--config", type=Path, help="TOML config file (adapters, backend URLs, orgs, roles)")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gateway (embedded Redis and demo backends by default)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)

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
    return parser


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Entry point. Returns the process exit status (0 ok, 1 refused, 2 usage)."""
    args = _parser().parse_args(argv)
    try:
        settings = Settings.load(environ or {}, args.config)
        if args.command == "serve":
            if args.host or args.port:
                settings = replace(settings, host=args.host or settings.host, port=args.port or settings.port)
            try:
                asyncio.run(run(settings))
            except KeyboardInterrupt:
                pass
            return 0
        handler = _HANDLERS[(args.command, getattr(args, f"{args.command}_command"))]
        return asyncio.run(_with_store(settings, lambda store: handler(store, args)))
    except GatewayError as error:
        print(f"countersign: {error}", file=sys.stderr)
        return 1


class _Store:
    def __init__(self, settings: Settings, url: str) -> None:
        self.settings = settings
        self.redis = redis_client(url)
        self.keys = KeyStore(self.redis)
        self.audit = RedisStreamAuditSink(self.redis)


async def _with_store(settings: Settings, action: Callable[[_Store], Awaitable[int]]) -> int:
    async with redis_url_for(settings, owner="cli") as url:
        store = _Store(settings, url)
        try:
            return await action(store)
        finally:
            await store.redis.aclose()


async def _keys_create(store: _Store, args: argparse.Namespace) -> int:
    roles = [role for chunk in args.roles for role in chunk.split(",") if role.strip()]
    known = store.settings.roles_of(args.org)
    if known is None:
        print(f"warning: org {args.org!r} is not configured; its keys will see no tools", file=sys.stderr)
    elif unknown := sorted(set(roles) - known):
        print(f"warning: role(s) {', '.join(unknown)} are not configured for org {args.org}", file=sys.stderr)
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
            f"{record.key_id}  {record.kind.value}  {record.subject}  org={record.org}  "
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
        print(f"{record.key_id}  {kind:<7}  {state:<7}  {created}Z  {record.org:<10}  {record.subject}  {roles}")
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
    print(f"revoked {record.key_id} ({record.subject})")
    return 0


def _format(event: AuditEvent, as_json: bool) -> str:
    if as_json:
        return json.dumps({"id": event.id, **event.to_fields()}, sort_keys=True)
    millis = int(event.id.split("-")[0]) if event.id else 0
    when = datetime.fromtimestamp(millis / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    parts = [f"{when}Z", event.action, event.outcome]
    parts += [
        f"{name}={value}"
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
        parts.append(f"({event.reason})")
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


_HANDLERS: dict[tuple[str, str], Callable[[_Store, argparse.Namespace], Awaitable[int]]] = {
    ("keys", "create"): _keys_create,
    ("keys", "list"): _keys_list,
    ("keys", "revoke"): _keys_revoke,
    ("audit", "tail"): _audit_tail,
}
