"""Registering, reviewing and pinning remote adapters: the one place those decisions are made.

Who calls it: the registry API (services, with service keys), the admin API and the CLI
(admins). A registration is validated in full (every problem listed), reviewed for text aimed
at the model (flags for the admin), checked against the operator's base-URL allowlist, and
stored as a *proposal*. The first service to register a name owns it (claimed atomically by the
store), and only it may propose changes.

Who reviews, accepts (pins, naming the hash they reviewed) and removes an adapter is
`policies.adapter_authority`: an admin with the ``registry`` role of an org that serves the
adapter (the operator's ``[orgs.NAME] adapters``), or an admin with ``registry-operator``. It is
decided before the registry is read, so a refusal (PERMISSION_DENIED, audited) is the same whether
or not the adapter exists. Once pinned, every gateway's live tool source picks it up.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import anyio
from pydantic import ValidationError

from gateway.audit.events import AuditEvent, AuditSink
from gateway.config.org_adapters import OrgAdapters
from gateway.decision import Decision
from gateway.errors import ToolDeclarationError
from gateway.principal import KeyKind, Principal
from gateway.registry.manifest import AdapterManifest, review_manifest, secret_namespace, secret_references
from gateway.registry.tools import ManifestError, tools_from_manifest
from gateway.review_answers import ReviewResult, validation_problems
from gateway.store.registrations import Registration, RegistryStore
from gateway.tools.toolbox import Toolbox
from policies.adapter_authority import OPERATOR_ROLE, REGISTRY_ROLE, may_manage_adapter, may_review_adapters
from policies.manifest_safety import check_base_url

__all__ = ["OPERATOR_ROLE", "REGISTRY_ROLE", "RegistryService"]

_NAME = re.compile(r"^[a-z][a-z0-9]{1,30}$")


class RegistryService:
    def __init__(
        self,
        store: RegistryStore,
        audit: AuditSink,
        *,
        allowed_base_urls: tuple[str, ...],
        served_tool_names: Callable[[], frozenset[str]],
        refresh: Callable[[], Awaitable[bool]],
        lease_seconds: float,
        org_adapters: OrgAdapters,
    ) -> None:
        """`org_adapters` is the operator's configuration of which org serves which adapter."""
        self._store = store
        self._lease_seconds = lease_seconds
        self._audit = audit
        self._allowed = allowed_base_urls
        self._served = served_tool_names
        self._refresh = refresh
        self._orgs = org_adapters

    async def register(self, service: Principal, name: str, document: Mapping[str, Any]) -> ReviewResult[Registration]:
        """Validate and store a proposal. Nothing is served until an admin accepts it."""
        if service.kind is not KeyKind.SERVICE:
            return await self._done(service, "registry.register", name, ReviewResult(code="PERMISSION_DENIED"))
        # Building a large adapter's tools takes a CPU-bound while: off the event loop, so the gateway's
        # other requests (and /healthz) are not held up behind it.
        problems, manifest = await anyio.to_thread.run_sync(self._validate, name, document)
        # Read first so a name owned by another service is refused before any word on the manifest;
        # the store's propose decides ownership atomically either way.
        existing = await self._store.get(name)
        taken: ReviewResult[Registration] = ReviewResult(
            code="PERMISSION_DENIED", message=f"adapter {name} belongs to another service"
        )
        if existing is not None and existing.owner != service.subject:
            return await self._done(service, "registry.register", name, taken)
        if problems or manifest is None:
            invalid: ReviewResult[Registration] = ReviewResult(
                code="VALIDATION_ERROR", message="manifest refused", problems=tuple(problems)
            )
            return await self._done(service, "registry.register", name, invalid)
        flags = review_manifest(manifest, other_tool_names=self._served())
        registration = await self._store.propose(
            name, manifest.model_dump(mode="json"), owner=service.subject, flags=[asdict(flag) for flag in flags]
        )
        if registration is None:  # another service claimed the name since it was read above
            return await self._done(service, "registry.register", name, taken)
        message = {"active": "unchanged; already served", "new": "new adapter quarantined until an admin accepts it"}
        result = ReviewResult(
            code="OK",
            message=message.get(registration.state, "change quarantined until an admin accepts it"),
            entry=registration,
        )
        return await self._done(service, "registry.register", name, result)

    def _validate(self, name: str, document: Mapping[str, Any]) -> tuple[list[str], AdapterManifest | None]:
        problems: list[str] = []
        if not _NAME.fullmatch(name):
            problems.append("name: lower-case letters and digits, 2-31 characters, starting with a letter")
        try:
            manifest = AdapterManifest.model_validate(document)
        except ValidationError as error:
            problems.extend(validation_problems(error, "manifest"))
            return problems, None
        for index, tool in enumerate(manifest.tools):
            if not tool.name.startswith(f"{name}_"):
                problems.append(f"tools[{index}].name: must start with {name}_")
        # A manifest names secrets by reference only, and only in its own namespace: otherwise a
        # service could have the gateway send it any secret of the gateway's environment.
        namespace = secret_namespace(name)
        for where, reference in secret_references(manifest).items():
            if not reference.startswith(namespace):
                problems.append(f"{where}: secret references of adapter {name} must start with {namespace}")
        problems.extend(f"base_url: {problem}" for problem in check_base_url(manifest.base_url, allowed=self._allowed))
        if manifest.credential is not None and manifest.credential.token_url is not None:
            # The client secret goes there: it is held to the same allowlist as the backend itself.
            token_url = manifest.credential.token_url
            problems.extend(f"credential.token_url: {p}" for p in check_base_url(token_url, allowed=self._allowed))
        if not problems:
            try:
                # Built as this gateway would serve them: a write that could outlast the lease is refused.
                Toolbox(tools_from_manifest(name, manifest), lease_seconds=self._lease_seconds)
            except ManifestError as error:
                problems.extend(error.problems)
            except ToolDeclarationError as error:
                places = [f"tools[{i}] ({t.name})" for i, t in enumerate(manifest.tools) if t.name == error.tool]
                problems.append(f"{places[0] if places else 'tools'}: {error}")
        return problems, manifest

    async def status(self, service: Principal, name: str) -> ReviewResult[Registration]:
        registration = await self._store.get(name)
        if registration is None or registration.owner != service.subject:
            return ReviewResult(code="NOT_FOUND")
        return ReviewResult(code="OK", entry=registration)

    async def review(self, admin: Principal) -> Sequence[Registration] | None:
        """The registrations `admin` may manage, with state, flags and diff; None when `admin` may not review."""
        verdict = may_review_adapters(admin)
        if not verdict.allowed:
            await self._audit.record(AuditEvent.refusal(admin, "registry.review", "PERMISSION_DENIED", verdict.reason))
            return None
        return [r for r in await self._store.all() if may_manage_adapter(admin, r.name, self._orgs).allowed]

    async def show(self, admin: Principal, name: str) -> ReviewResult[Registration]:
        """One registration, if `admin` may manage it (refusals audited; a successful read is not)."""
        verdict = may_manage_adapter(admin, name, self._orgs)
        if not verdict.allowed:
            return await self._done(admin, "registry.show", name, _denied(verdict))
        registration = await self._store.get(name)
        if registration is None:
            return await self._done(admin, "registry.show", name, ReviewResult(code="NOT_FOUND"))
        return ReviewResult(code="OK", entry=registration)

    async def accept(
        self, admin: Principal, name: str, *, expected_hash: str, acknowledged: frozenset[str] = frozenset()
    ) -> ReviewResult[Registration]:
        """Pin the proposal the admin reviewed (by its hash); the live tool source serves it next.

        An update that changes where the gateway's credential, identities and receipts go (the review's
        ``diff.attention``: base URL, credential, signing secret) is accepted only with each of those
        `acknowledged` by name; otherwise VALIDATION_ERROR, and nothing changes."""
        verdict = may_manage_adapter(admin, name, self._orgs)
        if not verdict.allowed:
            return await self._done(admin, "registry.accept", name, _denied(verdict))
        current = await self._store.get(name)
        if current is None or current.proposed is None:
            return await self._done(admin, "registry.accept", name, ReviewResult(code="NOT_FOUND"))
        if missing := [key for key in current.diff()["attention"] if key not in acknowledged]:
            unseen = ReviewResult(
                code="VALIDATION_ERROR",
                message=f"this update changes {', '.join(missing)}; accept again acknowledging {missing} if intended",
                problems=tuple(f"acknowledge: {key} changed and was not acknowledged" for key in missing),
                entry=current,
            )
            return await self._done(admin, "registry.accept", name, unseen)
        pinned = await self._store.accept(name, expected_hash=expected_hash, admin=admin.subject)
        if pinned is None:
            stale = ReviewResult(code="CONFLICT", message="the proposal changed since it was reviewed", entry=current)
            return await self._done(admin, "registry.accept", name, stale)
        await self._refresh()
        return await self._done(admin, "registry.accept", name, ReviewResult(code="OK", entry=pinned))

    async def remove(self, admin: Principal, name: str) -> ReviewResult[Registration]:
        """Stop serving the adapter and free its name."""
        verdict = may_manage_adapter(admin, name, self._orgs)
        if not verdict.allowed:
            return await self._done(admin, "registry.remove", name, _denied(verdict))
        if not await self._store.remove(name):
            return await self._done(admin, "registry.remove", name, ReviewResult(code="NOT_FOUND"))
        await self._refresh()
        return await self._done(admin, "registry.remove", name, ReviewResult(code="OK"))

    async def _done(
        self, who: Principal, action: str, name: str, result: ReviewResult[Registration]
    ) -> ReviewResult[Registration]:
        registration = result.entry
        about = {"adapter": name}
        if registration is not None and registration.proposed_hash:
            about["proposed_hash"] = registration.proposed_hash
        if result.problems:
            about["problems"] = str(len(result.problems))
        await self._audit.record(result.audit_event(who, action, about))
        return result


def _denied(verdict: Decision) -> ReviewResult[Registration]:
    # Decided from the key and the configuration alone: the same answer whether the adapter exists or not.
    return ReviewResult(code="PERMISSION_DENIED", message=verdict.reason)
