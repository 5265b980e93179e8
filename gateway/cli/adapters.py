"""`countersign adapters ...`: review and pin registered adapters, draft manifests from OpenAPI.

``review`` lists the registrations the admin may manage (those of adapters the admin's org serves,
or every one for ``registry-operator``) with their state, a change of base URL or credential first, safety
flags, the diff a decision would apply, and every proposed tool as a reviewer reads it
(`gateway.registry.review`: method, path, inputs, outputs and what the model sees, write contract);
``accept NAME --hash H`` pins the proposal with hash H (the one reviewed); ``remove NAME`` stops serving it.
``import-openapi FILE --name N`` prints a draft manifest for a person to check, and what it could not decide;
it registers nothing.

``import SPEC --name N`` is the service owner's path from an OpenAPI document (JSON or YAML, a file or
an http(s) URL) to registered adapters: it selects operations (``--tags``, ``--paths``, ``--operations``),
drafts one adapter or one per tag (``--split``), takes ``x-countersign`` keys from an ``--overlay`` file
so the API's own document stays untouched, and prints every limit hit (by name, with its numbers and the
operations that hit it), every problem, note and skipped part. ``--dry-run`` shows what each operation
becomes and sends nothing. With ``--register URL`` and no problem at all, each draft is sent to the
gateway's registry API (compact JSON, the service key from ``--service-key-env``), where it waits,
quarantined, for an admin's review; with any problem nothing is sent.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gateway.audit.events import AuditSink
from gateway.config.org_adapters import OrgAdapters
from gateway.config.settings import Settings
from gateway.errors import ManifestError
from gateway.principal import Principal
from gateway.printable import escape_unprintable
from gateway.registry.openapi_import import ImportResult, Selection, draft_adapters, draft_manifest, manifest_bytes
from gateway.registry.review import review_lines
from gateway.registry.service import RegistryService
from gateway.registry.views import AdapterRegistration
from gateway.review_answers import ReviewResult
from gateway.store.registrations import Registration, RegistryStore

__all__ = ["import_adapters", "import_openapi", "load_document", "report_review", "run"]

MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
"""The largest OpenAPI document read (GitHub's is 13 MB as JSON)."""
FETCH_TIMEOUT_SECONDS = 60.0


def load_document(source: str) -> Any:
    """The document at `source` (a path, or an http(s) URL), parsed as JSON, or as YAML when it is not JSON.

    Raises:
        ManifestError: unreadable, too large, or neither JSON nor YAML (the one problem says which).
    """
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=FETCH_TIMEOUT_SECONDS) as response:  # noqa: S310 (http(s) only)
                raw = response.read(MAX_DOCUMENT_BYTES + 1)
        except (OSError, ValueError) as error:
            raise ManifestError([f"cannot fetch {source}: {error}"]) from error
    else:
        try:
            with Path(source).open("rb") as file:
                raw = file.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as error:
            raise ManifestError([f"cannot read {source}: {error}"]) from error
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ManifestError([f"{source} is larger than {MAX_DOCUMENT_BYTES} bytes"])
    try:
        return json.loads(raw)
    except ValueError as json_error:
        try:
            # YAML 1.1 reads an unquoted ``on`` or ``no`` as a boolean; the safe loader builds plain data only.
            return yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as yaml_error:
            raise ManifestError([f"{source} is neither JSON ({json_error}) nor YAML ({yaml_error})"]) from yaml_error


def import_adapters(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Draft, report and (with ``--register``, when nothing is wrong) register. Exit 1 on any problem."""
    try:
        document = load_document(args.spec)
        overlay = load_document(args.overlay) if args.overlay else {}
    except ManifestError as error:
        print(f"countersign: {error}", file=sys.stderr)
        return 1
    if not isinstance(document, dict) or not isinstance(overlay, dict):
        print("countersign: the document and the overlay must each be a JSON or YAML object", file=sys.stderr)
        return 1
    select = Selection(
        tags=frozenset(args.tags), path_prefixes=tuple(args.paths), operation_ids=frozenset(args.operations)
    )
    drafts = draft_adapters(
        document, name=args.name, base_url=args.base_url, select=select, overlay=overlay, split=args.split
    )
    for draft in drafts:
        _print_draft(draft, dry_run=args.dry_run)
    if any(draft.problems for draft in drafts):
        count = sum(len(draft.problems) for draft in drafts)
        print(f"countersign: {count} problem(s); nothing was sent", file=sys.stderr)
        return 1
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        for draft in drafts:
            (args.out / f"{draft.name}.json").write_text(json.dumps(draft.manifest, indent=2, sort_keys=True) + "\n")
    if args.dry_run:
        return 0
    if args.register is None:
        if args.out is None:
            print(json.dumps({draft.name: draft.manifest for draft in drafts}, indent=2, sort_keys=True))
        return 0
    key = environ.get(args.service_key_env, "")
    if not key:
        print(f"countersign: {args.service_key_env} holds no service key; nothing was sent", file=sys.stderr)
        return 1
    return max(_register(args.register, key, draft) for draft in drafts)


def _print_draft(draft: ImportResult, *, dry_run: bool) -> None:
    tools = draft.manifest.get("tools", [])
    print(f"adapter {draft.name}: {len(tools)} tool(s), {manifest_bytes(draft.manifest)} bytes", file=sys.stderr)
    if dry_run:
        for operation in draft.operations:
            print(f"  {operation.line()}", file=sys.stderr)
    for hit in draft.limits:
        print(f"  {'LIMIT' if hit.blocking else 'limit met by the importer:'} {hit}", file=sys.stderr)
    for problem in draft.problems:
        if not problem.startswith("limit "):
            print(f"  problem: {problem}", file=sys.stderr)
    for where, variable in draft.secrets:
        print(f"  secret: set {variable} on the gateway host ({where})", file=sys.stderr)
    for note in draft.notes:
        print(f"  note: {note}", file=sys.stderr)
    for skipped in draft.skipped:
        print(f"  skipped: {skipped}", file=sys.stderr)


def _register(gateway: str, key: str, draft: ImportResult) -> int:
    """PUT the draft to the registry API; print what it answered. 0 when stored (or unchanged)."""
    body = json.dumps(draft.manifest, separators=(",", ":"), ensure_ascii=False).encode()
    request = urllib.request.Request(
        f"{gateway.rstrip('/')}/registry/api/adapters/{draft.name}",
        data=body,
        method="PUT",
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_SECONDS) as response:  # noqa: S310
            status, answer = response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        status, answer = error.code, _json_or_text(error.read())
    except OSError as error:
        print(f"countersign: {draft.name}: cannot reach {gateway}: {error}", file=sys.stderr)
        return 1
    if status in (200, 202):
        adapter = answer.get("adapter") or {}
        print(f"{draft.name}: {answer.get('message', 'stored')} (proposed {adapter.get('proposed_hash')})")
        return 0
    detail = answer.get("error", {}) if isinstance(answer, dict) else {}
    refusal = f"{status} {detail.get('code', '')}: {detail.get('message', answer)}"
    print(f"countersign: {draft.name}: {refusal}", file=sys.stderr)
    for problem in detail.get("problems", []):
        print(f"  {problem}", file=sys.stderr)
    return 1


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return {"error": {"message": raw[:500].decode(errors="replace")}}


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
            return report_review(ReviewResult(code="PERMISSION_DENIED", message=refused))
        for registration in registrations:
            row = AdapterRegistration.from_registration(registration).model_dump(mode="json")
            if args.json:
                print(json.dumps(row, sort_keys=True))
                continue
            print(f"{row['name']}  {row['state']}  owner={row['owner']}  proposed={row['proposed_hash']}")
            diff = row["diff"] or {}
            # First: a change of where the gateway's credential, identities and receipts go.
            for key in diff.get("attention", []):
                print(f"  ATTENTION {key} changes: accept with --acknowledge {key} if intended")
            for flag in row["flags"]:
                print(f"  FLAG {flag['code']} at {flag['field']}: {flag['excerpt']}")
            if diff.get("settings"):
                print("  settings:\n" + "\n".join(f"    {line}" for line in diff["settings"].splitlines()))
            for key in ("added", "removed"):
                if diff.get(key):
                    print(f"  {key}: {', '.join(diff[key])}")
            for name, text in (diff.get("reviewed") or {}).items():
                print(f"  changed {name}:\n" + "\n".join(f"    {line}" for line in text.splitlines()))
            for name, text in (diff.get("changed") or {}).items():
                print(f"  changed {name} (manifest):\n" + "\n".join(f"    {line}" for line in text.splitlines()))
            for tool in row["tools"]:
                # A service wrote every word of it: nothing in it may act on the reviewer's terminal.
                print("\n".join(f"  {escape_unprintable(line)}" for line in review_lines(tool["name"], tool)))
        return 0
    actions: dict[str, Callable[[], Awaitable[ReviewResult[Registration]]]] = {
        "accept": lambda: service.accept(
            admin, args.name, expected_hash=args.hash, acknowledged=frozenset(args.acknowledge)
        ),
        "remove": lambda: service.remove(admin, args.name),
    }
    return report_review(await actions[args.adapters_command]())


async def _no_refresh() -> bool:
    # Every gateway watches the registry version; the CLI has no catalog of its own to refresh.
    return False


def report_review(result: ReviewResult[Any]) -> int:
    """Say what a review answered (of an adapter here, of a fronted MCP server in `gateway.cli.upstreams`): on
    stdout when it went through (exit 0), on stderr with every problem when it was refused (exit 1)."""
    if result.ok:
        print(f"{result.code}: {result.message or 'done'}")
        return 0
    print(f"countersign: {result.code}: {result.said}", file=sys.stderr)
    for problem in result.problems:
        print(f"  {problem}", file=sys.stderr)
    return 1
