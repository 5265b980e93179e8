"""`countersign adapters ...`: review and pin registered adapters, draft manifests from OpenAPI.

``review`` lists the registrations the admin may manage (those of adapters the admin's org serves,
or every one for ``registry-operator``) with their state, safety flags and the diff a decision would
apply; ``accept NAME --hash H`` pins the proposal with hash H (the one reviewed); ``remove NAME``
stops serving it. ``import-openapi FILE --name N`` prints a draft manifest for a person to check,
and what it could not decide; it registers nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.audit.events import AuditSink
from gateway.config.org_adapters import OrgAdapters
from gateway.config.settings import Settings
from gateway.principal import Principal
from gateway.registry.openapi_import import draft_manifest
from gateway.registry.service import RegistryResult, RegistryService
from gateway.registry.views import AdapterRegistration
from gateway.store.registrations import RegistryStore

__all__ = ["import_openapi", "run"]


def import_openapi(args: argparse.Namespace) -> int:
    """Print the draft manifest (stdout) and what could not be decided (stderr). Exit 1 if anything."""
    try:
        document = json.loads(args.spec.read_text())
    except (OSError, ValueError) as error:
        print(f"countersign: cannot read {args.spec}: {error}", file=sys.stderr)
        return 1
    result = draft_manifest(document, name=args.name, base_url=args.base_url)
    print(json.dumps(result.manifest, indent=2, sort_keys=True))
    for problem in result.problems:
        print(f"problem: {problem}", file=sys.stderr)
    for skipped in result.skipped:
        print(f"skipped: {skipped}", file=sys.stderr)
    return 1 if result.problems else 0


async def run(
    client: Any,
    audit: AuditSink,
    admin: Principal,
    args: argparse.Namespace,
    *,
    allowed: tuple[str, ...],
    org_adapters: OrgAdapters,
) -> int:
    """Run one `adapters` review command as `admin`, with the same authority as the admin API."""
    # The CLI reviews, accepts and removes; it never validates a registration, so the lease a
    # registration is held to (each gateway's own) plays no part here.
    service = RegistryService(
        RegistryStore(client),
        audit,
        allowed_base_urls=allowed,
        served_tool_names=frozenset,
        refresh=_no_refresh,
        lease_seconds=Settings().lease_seconds,
        org_adapters=org_adapters,
    )
    if args.adapters_command == "review":
        registrations = await service.review(admin)
        if registrations is None:
            refused = "reviewing needs the registry or registry-operator role"
            return _report(RegistryResult(code="PERMISSION_DENIED", message=refused))
        for registration in registrations:
            row = AdapterRegistration.from_registration(registration).model_dump(mode="json")
            if args.json:
                print(json.dumps(row, sort_keys=True))
                continue
            print(f"{row['name']}  {row['state']}  owner={row['owner']}  proposed={row['proposed_hash']}")
            for flag in row["flags"]:
                print(f"  FLAG {flag['code']} at {flag['field']}: {flag['excerpt']}")
            diff = row["diff"] or {}
            for key in ("added", "removed"):
                if diff.get(key):
                    print(f"  {key}: {', '.join(diff[key])}")
            for name, text in (diff.get("changed") or {}).items():
                print(f"  changed {name}:\n" + "\n".join(f"    {line}" for line in text.splitlines()))
            for tool, fields in row["model_sees"].items():
                print(
                    f"  {tool} shows the model: " + ("; ".join(f"{f} {how}" for f, how in fields.items()) or "no text")
                )
        return 0
    actions: dict[str, Callable[[], Awaitable[RegistryResult]]] = {
        "accept": lambda: service.accept(admin, args.name, expected_hash=args.hash),
        "remove": lambda: service.remove(admin, args.name),
    }
    return _report(await actions[args.adapters_command]())


async def _no_refresh() -> bool:
    # Every gateway watches the registry version; the CLI has no catalog of its own to refresh.
    return False


def _report(result: RegistryResult) -> int:
    if result.ok:
        print(f"{result.code}: {result.message or 'done'}")
        return 0
    print(f"countersign: {result.code}: {result.message or result.code.lower()}", file=sys.stderr)
    for problem in result.problems:
        print(f"  {problem}", file=sys.stderr)
    return 1
