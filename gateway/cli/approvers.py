"""The operator's commands on approvers: their console sessions and their passkeys.

Who calls it: `gateway.cli.commands`, for ``countersign sessions list|revoke`` and ``countersign passkeys
list|remove|reset``, each naming the approver by ``--org`` and ``--subject`` (normalised as every subject
is). They act as the operator who holds the store, as ``keys`` does, and each change is audited with the
operator's login name. Revoking ends every console session of the approver at once (their next request
is refused); resetting forgets every passkey, the recovery step for a lost authenticator (the approver
registers a new one after signing in again).
"""

from __future__ import annotations

import argparse
import getpass
import sys

from gateway.audit.events import AuditEvent, AuditSink
from gateway.canonical import iso_from_ms
from gateway.passkeys.service import PasskeyService
from gateway.principal import KeyKind, Principal, normalize_subject
from gateway.printable import escape_unprintable
from gateway.store.console_sessions import SessionStore

__all__ = ["operator", "passkeys_command", "sessions_command"]


def operator() -> Principal:
    """Who runs the command, as the audit trail names them."""
    return Principal(subject=f"operator:{getpass.getuser()}", org="", roles=frozenset(), kind=KeyKind.ADMIN)


async def sessions_command(sessions: SessionStore, audit: AuditSink, args: argparse.Namespace) -> int:
    org, subject = args.org.strip(), normalize_subject(args.subject)
    if args.sessions_command == "list":
        for session in await sessions.list(org, subject):
            since, ends = iso_from_ms(session.created_ms), iso_from_ms(session.ends_ms)
            print(f"ses_{session.session_hash[:16]}  since {since}  ends {ends}")
        return 0
    ended = await sessions.revoke(org, subject)
    who = operator()
    await audit.record(
        AuditEvent(
            action="session.revoke",
            outcome="ok",
            subject=who.subject,
            org=org,
            extra={"approver": subject[:200], "ended": str(ended)},
        )
    )
    print(f"ended {ended} console session(s) of {escape_unprintable(subject)} ({escape_unprintable(org)})")
    return 0


async def passkeys_command(passkeys: PasskeyService, args: argparse.Namespace) -> int:
    org, subject = args.org.strip(), normalize_subject(args.subject)
    approver = Principal(subject=subject, org=org, roles=frozenset(), kind=KeyKind.ADMIN, key_id="operator")
    if args.passkeys_command == "list":
        for passkey in await passkeys.list(approver):
            name = escape_unprintable(passkey.name)
            print(
                f"{passkey.credential_id}  {name}  counter={passkey.sign_count}  "
                f"since {iso_from_ms(passkey.created_ms)}"
            )
        return 0
    if args.passkeys_command == "remove":
        removed = await passkeys.remove(approver, args.credential_id)
        if not removed.ok:
            print(f"countersign: {removed.code.value}: {removed.message}", file=sys.stderr)
            return 1
        print(f"removed passkey {escape_unprintable(args.credential_id)}")
        return 0
    count = await passkeys.reset(operator(), org=org, subject=subject)
    print(
        f"removed {count} passkey(s) of {escape_unprintable(subject)} ({escape_unprintable(org)}); "
        "they register a new one from the console once signed in"
    )
    return 0
