"""The commands of `countersign` that act on the store: keys, signing keys, audit, and the admin's cards and adapters.

Who calls it: `gateway.cli.main`, after parsing, with the resolved `Settings`. Each command gets one
`_Store` (the Redis of the settings, or the data directory's embedded server, attached to or
started for the command) and says on stderr, in one line, which one it is.
`cards` (`gateway.cli.cards`) and `adapters` (`gateway.cli.adapters`) act as an admin, identified by
an admin key, which this module resolves (and audits when it is refused) before handing the admin
to them.

``signing-keys rotate|list`` manage the gateway's own signing keys. Production never makes a signing
key by itself: the first ``rotate`` on an empty store makes the first key (until then approved writes
wait, unsent, and backends get no identity token they can verify with the JWKS). Each later ``rotate``
makes a new key active at once; the one it replaces stays published in ``/.well-known/jwks.json`` for
`gateway.signing.signer.OVERLAP_SECONDS`, long enough for every token signed with it to expire, and is
dropped by the first rotation after that. Every gateway process sees the new key within
`gateway.signing.signer.CACHE_SECONDS`. Nothing here prints a private key.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from gateway.archives.audit_archive import AuditArchive, on_disk, read_checkpoint
from gateway.audit.chain import Checkpoint
from gateway.audit.events import AuditEvent, AuditSink
from gateway.audit.formats import export_line
from gateway.audit.secret import audit_secret
from gateway.canonical import iso_from_ms
from gateway.codes import Code
from gateway.config.settings import Settings
from gateway.errors import AuditArchiveError, AuthError
from gateway.principal import KeyKind, Principal
from gateway.printable import escape_unprintable
from gateway.signing.signer import OVERLAP_SECONDS
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.audit_trail import AuditTrail
from gateway.store.client import connect
from gateway.store.keys import KeyStore
from gateway.store.signing_keys import SigningKeyStore

__all__ = ["list_signing_keys", "rotate_signing_key", "run_command", "where"]


async def run_command(settings: Settings, args: argparse.Namespace) -> int:
    """Run the parsed store command `args` against the store of `settings`; its exit status."""
    handler = _HANDLERS.get((args.command, getattr(args, f"{args.command}_command")))
    handler = handler or {"cards": _cards, "adapters": _adapters, "upstreams": _upstreams}[args.command]
    print(where(settings), file=sys.stderr)
    if settings.redis_url is not None:
        return await _on(settings, settings.redis_url, handler, args)
    # As `gateway.runtime.serve.redis_url_for`, without importing the server (and the MCP SDK) to get there.
    from gateway.store.embedded import embedded_redis

    async with embedded_redis(settings.data_dir, owner="cli") as embedded:
        return await _on(settings, embedded.url, handler, args)


async def _on(settings: Settings, url: str, handler: _Handler, args: argparse.Namespace) -> int:
    store = _Store(settings, url)
    try:
        return await handler(store, args)
    finally:
        await store.connection.aclose()


def where(settings: Settings) -> str:
    """One line naming the store a command acts on, a warning when the data directory does not exist
    yet (a mistyped path would otherwise silently give an empty store), the Redis URL without its password."""
    if settings.redis_url is not None:
        return f"countersign: using Redis {_without_credentials(settings.redis_url)}"
    data_dir = settings.data_dir.resolve()
    if not data_dir.exists():
        return (
            f"countersign: warning: data directory {data_dir} does not exist: starting an empty one "
            "(is it the one serve uses? --config or COUNTERSIGN_DATA_DIR)"
        )
    return f"countersign: using data directory {data_dir}"


def _without_credentials(url: str) -> str:
    """`url` without its user, password and query. Split by hand, as `gateway.config.redis_target` does: a
    Sentinel or Cluster URL lists several ``host:port`` pairs, on which `urlsplit(url).port` raises."""
    scheme, separator, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    # The query can carry options redis-py reads as keywords, a password among them: it is left out.
    return f"{scheme}{separator}{netloc.rpartition('@')[2]}{slash}{path.partition('?')[0]}"


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


_Handler = Callable[[_Store, argparse.Namespace], Awaitable[int]]


async def _by_operator(store: _Store, event: AuditEvent) -> None:
    """Audit `event`, something the operator at this terminal did to the key store, with their login as ``by``."""
    await store.audit.record(dataclasses.replace(event, extra={**event.extra, "by": getpass.getuser()}))


async def _keys_create(store: _Store, args: argparse.Namespace) -> int:
    roles = [role for chunk in args.roles for role in chunk.split(",") if role.strip()]
    known = store.settings.roles_of(args.org)
    org = escape_unprintable(args.org)
    if known is None:
        print(f"warning: org {org} is not configured; its keys will see no tools", file=sys.stderr)
    elif unknown := sorted(set(roles) - known):
        named = escape_unprintable(", ".join(unknown))
        print(f"warning: role(s) {named} are not configured for org {org}", file=sys.stderr)
    try:
        token, record = await store.keys.create(
            kind=KeyKind(args.kind),
            subject=args.subject,
            org=args.org,
            roles=roles,
            allow_mixed_scripts=args.allow_mixed_scripts,
        )
    except AuthError as refused:
        subject, code = escape_unprintable(args.subject), Code.VALIDATION_ERROR.value
        refusal = AuditEvent(
            action="key.create", outcome="deny", subject=subject, org=org, code=code, reason=str(refused)
        )
        await _by_operator(store, refusal)
        raise
    given = {"kind": record.kind.value, "roles": ",".join(sorted(record.roles))}
    made = AuditEvent(action="key.create", outcome="ok", subject=record.subject, org=record.org, extra=given)
    await _by_operator(store, dataclasses.replace(made, key_id=record.key_id))
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
    revoked = AuditEvent(action="key.revoke", outcome="ok", subject=record.subject, org=record.org)
    await _by_operator(store, dataclasses.replace(revoked, key_id=record.key_id))
    print(f"revoked {record.key_id} ({escape_unprintable(record.subject)})")
    return 0


async def _subjects_revoke(store: _Store, args: argparse.Namespace) -> int:
    revocation = await store.keys.revoke_subject(args.org, args.subject, by=getpass.getuser())
    await _by_operator(
        store, AuditEvent(action="subject.revoke", outcome="ok", subject=revocation.subject, org=revocation.org)
    )
    shown = escape_unprintable(revocation.subject)
    print(f"revoked {shown} of {escape_unprintable(revocation.org)}, under every spelling of it")
    return 0


async def _subjects_list(store: _Store, args: argparse.Namespace) -> int:
    for revocation in await store.keys.revoked_subjects():
        at = datetime.fromtimestamp(float(revocation.at), UTC).strftime("%Y-%m-%d %H:%M:%S")
        org, subject = escape_unprintable(revocation.org), escape_unprintable(revocation.subject)
        print(f"{at}Z  {org:<10}  {subject}  by {escape_unprintable(revocation.by)}")
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
    """The trail, archive then stream, oldest first, from `--since` up to `--until` (milliseconds, by the
    time in each entry's id), one JSON object a line: our fields, or OCSF."""
    since, until = args.since or 0, args.until
    product = _version() if args.format == "ocsf" else ""
    if args.checkpoint is not None:
        # Taken first: the export that follows reaches at least this head, and a trail verified later must too.
        checkpoint = await store.trail.checkpoint()
        if checkpoint is None:
            raise AuditArchiveError("the audit chain has no sealed head to checkpoint yet", path=args.checkpoint)
        with on_disk(AuditArchiveError, "write the audit checkpoint", args.checkpoint):
            args.checkpoint.write_text(checkpoint.to_json() + "\n", encoding="utf-8")
    async for entry_id, fields in store.trail.entries():
        millis = int(entry_id.split("-")[0])
        if millis < since:
            continue
        if until is not None and millis >= until:
            break  # entries come oldest first
        print(export_line(entry_id, fields, format=args.format, product_version=product))
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("countersign")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without installing
        return "0.0.0"


async def _audit_verify(store: _Store, args: argparse.Namespace) -> int:
    """Exit 0 when the chain holds from the first entry to the head Redis keeps; 1 naming the first break."""
    checkpoints: dict[str, Checkpoint] = {}
    for path in args.checkpoint:
        if (checkpoint := read_checkpoint(path)) is None:
            raise AuditArchiveError(f"no audit checkpoint at {path}", path=path)
        checkpoints[str(path)] = checkpoint
    verdict = await store.trail.verify(store.secret, checkpoints)
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


# -- signing keys ---------------------------------------------------------------------------------


async def rotate_signing_key(store: SigningKeyStore, audit: AuditSink) -> int:
    """Make a new active key; exit status 1 when another rotation won the race (nothing changed)."""
    before = await store.load()
    done, kid = await store.rotate(overlap_ms=OVERLAP_SECONDS * 1000, expected_active=before.active_kid)
    await audit.record(
        AuditEvent(
            action="signing_key.rotate",
            outcome="ok" if done else "conflict",
            subject=getpass.getuser(),
            extra={"kid": kid, "previous": before.active_kid or ""},
        )
    )
    if not done:
        print(f"another rotation made {kid} active meanwhile; nothing changed", file=sys.stderr)
        return 1
    print(kid)
    retiring = f"; {before.active_kid} stays published for {OVERLAP_SECONDS} s" if before.active_kid else ""
    print(f"signing key {kid} is active{retiring}", file=sys.stderr)
    return 0


async def list_signing_keys(store: SigningKeyStore) -> int:
    """One line per published key: kid, active or when it retires, when it was made."""
    keys = await store.load()
    if not keys.published:
        print("no signing key: run countersign signing-keys rotate", file=sys.stderr)
    for key in keys.published:
        state = "active" if key.kid == keys.active_kid else f"retires {iso_from_ms(key.retire_at_ms or 0)}"
        print(f"{key.kid}  {key.jwk.get('alg')}  {state}  created {iso_from_ms(key.created_ms)}")
    return 0


async def _signing_rotate(store: _Store, args: argparse.Namespace) -> int:
    return await rotate_signing_key(SigningKeyStore(store.redis, secret=store.secret), store.audit)


async def _signing_list(store: _Store, args: argparse.Namespace) -> int:
    return await list_signing_keys(SigningKeyStore(store.redis, secret=store.secret))


async def _sessions(store: _Store, args: argparse.Namespace) -> int:
    from gateway.cli.approvers import sessions_command
    from gateway.store.console_sessions import SessionStore

    return await sessions_command(SessionStore(store.redis), store.audit, args)


async def _passkeys(store: _Store, args: argparse.Namespace) -> int:
    from gateway.cli.approvers import passkeys_command
    from gateway.runtime.passkeys import passkey_service

    return await passkeys_command(passkey_service(store.settings, store.connection, store.audit), args)


# -- admin commands -------------------------------------------------------------------------------


async def _cards(store: _Store, args: argparse.Namespace) -> int:
    admin = await _admin(store, args.key)
    if admin is None:
        return 1
    from gateway.archives.card_archive import CardArchive
    from gateway.cli import cards as cli_cards  # here: each command imports only what it uses
    from gateway.runtime.passkeys import passkey_service

    return await cli_cards.run(
        store.redis,
        store.audit,
        admin,
        args,
        passkeys=passkey_service(store.settings, store.connection, store.audit),
        require_passkey=store.settings.approvals.require_passkey,
        batch_limit=store.settings.limits.batch_decisions,
        archive=CardArchive(store.settings.cards_dir),
        trail=store.trail,
    )


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
    from gateway.cli import adapters as cli_adapters

    return await cli_adapters.run(
        store.redis,
        store.audit,
        admin,
        args,
        allowed=settings.registry_allowed_base_urls,
        org_adapters=settings.org_adapters,
    )


async def _upstreams(store: _Store, args: argparse.Namespace) -> int:
    admin = await _admin(store, args.key)
    if admin is None:
        return 1
    from gateway.cli import upstreams as cli_upstreams

    return await cli_upstreams.run(store.redis, store.audit, admin, args, store.settings)


async def _policy_explain(store: _Store, args: argparse.Namespace) -> int:
    from gateway.cli.policy import explain, parse_arguments
    from gateway.cli.upstreams import upstream_reviews
    from gateway.registry.tools import pinned_tools
    from gateway.runtime.app import tools_for
    from gateway.runtime.upstreams import last_served_tools
    from gateway.store.registrations import RegistryStore

    record = await store.keys.get(args.key)
    if record is None:
        print(f"countersign: no key {escape_unprintable(args.key)}", file=sys.stderr)
        return 1
    arguments = parse_arguments(args.args)
    # The catalog the gateway decides with: the configured adapters', the registered ones pinned, and the fronted
    # servers' reviewed tools as a gateway last listed them.
    served = tools_for(store.settings)
    registered = pinned_tools(await RegistryStore(store.redis).pinned(), served)
    reviews = upstream_reviews(store.redis, store.audit, store.settings)
    taken = {tool.name for tool in [*served, *registered]}
    registered += await last_served_tools(reviews, secrets=store.settings.secrets, taken=taken)
    return explain(
        store.settings,
        record.principal(),
        args.tool,
        arguments,
        tainted=args.tainted,
        path=args.policies,
        registered=registered,
    )


_HANDLERS: dict[tuple[str, str], _Handler] = {
    ("policy", "explain"): _policy_explain,
    ("signing-keys", "rotate"): _signing_rotate,
    ("signing-keys", "list"): _signing_list,
    ("adapters", "review"): _adapters,
    ("adapters", "accept"): _adapters,
    ("adapters", "remove"): _adapters,
    ("upstreams", "review"): _upstreams,
    ("upstreams", "accept"): _upstreams,
    ("upstreams", "accept-registration"): _upstreams,
    ("sessions", "list"): _sessions,
    ("sessions", "revoke"): _sessions,
    ("passkeys", "list"): _passkeys,
    ("passkeys", "remove"): _passkeys,
    ("passkeys", "reset"): _passkeys,
    ("keys", "create"): _keys_create,
    ("keys", "list"): _keys_list,
    ("keys", "revoke"): _keys_revoke,
    ("subjects", "revoke"): _subjects_revoke,
    ("subjects", "list"): _subjects_list,
    ("audit", "tail"): _audit_tail,
    ("audit", "verify"): _audit_verify,
    ("audit", "export"): _audit_export,
}
