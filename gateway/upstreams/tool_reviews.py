"""Review of fronted MCP servers' tools through the gateway: what is quarantined, and a person's acceptance.

Who calls it: the admin API (``/admin/api/upstreams``), the CLI (``countersign upstreams``) and, through the
API, the console; the runtime (`gateway.runtime.upstreams`) asks it which reviews are in force.

An upstream's tool is served only under a review that pins the hash of the definition listed now
(`gateway.upstreams.review`). Reviews come from the config file (``[upstreams.<name>.tools.<tool>]``) and from
here: an admin with the ``registry`` role of an org that serves the upstream (or ``registry-operator``:
`policies.adapter_authority`, the same authority as for registered adapters) reads the quarantined tool
with the upstream's annotations as suggestions, and for a changed definition the diff from the one reviewed,
then classifies it (read, write or hidden, with its access) naming the hash they read. A review naming
another hash than the one listed now is refused (CONFLICT): the definition changed under the reviewer. A
review stored here takes precedence over the config file's for the same tool. Every acceptance and every
refusal is audited.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.audit.events import AuditEvent, AuditSink
from gateway.canonical import canonical_json
from gateway.config.org_adapters import OrgAdapters
from gateway.config.upstreams import ToolReview, UpstreamSection, check_upstream_name
from gateway.principal import KeyKind, Principal
from gateway.review_answers import ReviewResult, SafetyFlag, validation_problems
from gateway.store.upstream_reviews import UpstreamReviewStore
from gateway.upstreams.review import definition_diff, definition_hash
from gateway.upstreams.views import FrontedServer, FrontedTool
from policies.adapter_authority import may_manage_adapter, may_review_adapters
from policies.manifest_safety import check_base_url
from policies.text_safety import review_texts, strings_in

__all__ = [
    "RegistrationAcceptance",
    "UpstreamReviews",
    "registration_attention",
    "registration_hash",
]

logger = logging.getLogger(__name__)


class UpstreamReviews:
    """The reviews in force for each configured upstream, and the admins' review of its tools."""

    def __init__(
        self,
        sections: Mapping[str, UpstreamSection],
        store: UpstreamReviewStore,
        audit: AuditSink,
        *,
        org_adapters: OrgAdapters,
        now_ms: Callable[[], int],
        served_tool_names: Callable[[], frozenset[str]],
        allowed_base_urls: tuple[str, ...] = (),
    ) -> None:
        """`sections` are the config file's upstreams; services may register more (HTTP, to `allowed_base_urls`).
        `served_tool_names` are the names agents are served now: a definition naming one of another backend's is
        flagged (``calls_other_tools``) in the review."""
        self._sections = sections
        self._served = served_tool_names
        self._allowed = allowed_base_urls
        self.store = store
        self._audit = audit
        self._orgs = org_adapters
        self._now_ms = now_ms
        self._listeners: list[Callable[[str], Awaitable[None]]] = []

    def on_change(self, listener: Callable[[str], Awaitable[None]]) -> None:
        """`listener(upstream)` runs after a review is stored, so this process serves it without waiting to poll."""
        self._listeners.append(listener)

    async def sections(self) -> dict[str, UpstreamSection]:
        """Every upstream to front: the config file's, and those services registered (a name in the file wins)."""
        found = dict(self._sections)
        for name, document in (await self.store.registered()).items():
            if name in found:
                continue
            try:
                found[name] = UpstreamSection.model_validate(document)
            except ValidationError as error:
                logger.error("registered upstream %s unreadable, not fronted: %s", name, error)
        return found

    async def register(self, service: Principal, upstream: str, document: Any) -> ReviewResult[FrontedServer]:
        """Store a service's HTTP upstream (`document`: an ``[upstreams.<name>]`` section without reviews). Its tools
        are quarantined like every upstream's until a registry admin reviews them."""
        action = "upstreams.register"
        if service.kind is not KeyKind.SERVICE:
            return await self._done(service, action, upstream, "", _refused("PERMISSION_DENIED", "a service key"))
        problems: list[str] = []
        try:
            check_upstream_name(upstream)
        except ValueError as error:
            problems.append(f"name: {error}")
        section = None
        try:
            section = UpstreamSection.model_validate(document)
        except ValidationError as error:
            problems.extend(validation_problems(error, "upstream"))
        if section is not None:
            # A service never makes the gateway start a program, and never reviews its own tools.
            if section.transport != "http":
                problems.append('transport: a service registers "http" upstreams only')
            if section.tools:
                problems.append("tools: reviews are made by a registry admin, not registered")
            problems.extend(
                f"url: {problem}" for problem in check_base_url(str(section.url or ""), allowed=self._allowed)
            )
            namespace = f"{upstream.upper()}_"
            for where, reference in (
                ("token_env", section.token_env),
                ("oauth.client_secret_env", section.oauth.client_secret_env if section.oauth else None),
            ):
                if reference is not None and not reference.startswith(namespace):
                    problems.append(f"{where}: secret references of upstream {upstream} must start with {namespace}")
        if problems or section is None:
            refused = _refused("VALIDATION_ERROR", "upstream refused", tuple(problems))
            return await self._done(service, action, upstream, "", refused)
        if upstream in self._sections:
            taken = _refused("PERMISSION_DENIED", f"upstream {upstream} is configured by the operator")
            return await self._done(service, action, upstream, "", taken)
        document = section.model_dump(mode="json")
        before = (await self.store.registered()).get(upstream)
        attention = registration_attention(before, document) if before is not None else ()
        owner = await self.store.register(upstream, document, owner=service.subject, hold=bool(attention))
        if owner != service.subject:
            taken = _refused("PERMISSION_DENIED", f"upstream {upstream} belongs to another service")
            return await self._done(service, action, upstream, "", taken)
        for listener in self._listeners:
            await listener(upstream)
        if attention:
            # Another server, or the gateway's credential sent elsewhere: a registry admin says so first, as for a
            # registered adapter's base URL. The server registered before stays fronted meanwhile.
            held: ReviewResult[FrontedServer] = ReviewResult(
                code="OK",
                message=f"the new {', '.join(attention)} is used once a registry admin accepts it; until then the"
                " server registered before is fronted",
                extra={"attention": ",".join(attention)},
            )
            return await self._done(service, action, upstream, "", held)
        done: ReviewResult[FrontedServer] = ReviewResult(
            code="OK", message="registered; its tools are quarantined until a registry admin reviews them"
        )
        return await self._done(service, action, upstream, "", done)

    async def accept_registration(self, admin: Principal, upstream: str, document: Any) -> ReviewResult[FrontedServer]:
        """Front the section `upstream`'s service registered again (`document`: a `RegistrationAcceptance` naming
        its hash and acknowledging each setting the change touches), in place of the one fronted now."""
        action = "upstreams.accept_registration"
        verdict = may_manage_adapter(admin, upstream, self._orgs)
        if not verdict.allowed:
            return await self._done(admin, action, upstream, "", _refused("PERMISSION_DENIED", verdict.reason))
        try:
            acceptance = RegistrationAcceptance.model_validate(document)
        except ValidationError as error:
            refused = _refused("VALIDATION_ERROR", "acceptance refused", validation_problems(error, "body"))
            return await self._done(admin, action, upstream, "", refused)
        proposed = await self.store.proposed(upstream)
        before = (await self.store.registered()).get(upstream)
        if proposed is None or before is None:
            missing = _refused("NOT_FOUND", f"{upstream} has no registration waiting for acceptance")
            return await self._done(admin, action, upstream, "", missing)
        if registration_hash(proposed) != acceptance.hash:
            stale = _refused("CONFLICT", f"{upstream} was registered again since: read it again")
            return await self._done(admin, action, upstream, "", stale)
        attention = registration_attention(before, proposed)
        if set(acceptance.acknowledge) != set(attention):
            named = (f"acknowledge: name exactly {list(attention)}",)
            unseen = _refused("VALIDATION_ERROR", "acknowledge each changed setting by name", named)
            return await self._done(admin, action, upstream, "", unseen)
        await self.store.adopt(upstream, proposed)
        for listener in self._listeners:
            await listener(upstream)
        done: ReviewResult[FrontedServer] = ReviewResult(
            code="OK",
            message=f"{upstream} is fronted as registered now; its tools stay held to their reviews' hashes",
            extra={"attention": ",".join(attention), "hash": acceptance.hash},
        )
        return await self._done(admin, action, upstream, "", done)

    async def in_force(self, upstream: str) -> tuple[dict[str, ToolReview], dict[str, str]]:
        """The reviews `upstream` is served by (the config file's, replaced tool by tool by those stored), and who
        made each (``config`` or the admin)."""
        section = (await self.sections())[upstream]
        reviews, by = dict(section.tools), dict.fromkeys(section.tools, "config")
        for tool, stored in (await self.store.reviews(upstream)).items():
            try:
                reviews[tool] = ToolReview.model_validate(stored.review)
            except ValidationError as error:
                # Validated when accepted; only a gateway that reads reviews differently gets here. Not served.
                logger.error("upstream %s: stored review of %s unreadable, tool held back: %s", upstream, tool, error)
                reviews.pop(tool, None)
                by.pop(tool, None)
                continue
            by[tool] = stored.by
        return reviews, by

    async def overview(self, admin: Principal) -> list[FrontedServer] | None:
        """Every upstream `admin` may review, with its tools; None when `admin` may not review at all."""
        verdict = may_review_adapters(admin)
        if not verdict.allowed:
            await self._audit.record(AuditEvent.refusal(admin, "upstreams.review", "PERMISSION_DENIED", verdict.reason))
            return None
        sections = await self.sections()
        return [
            await self._view(name, sections[name])
            for name in sorted(sections)
            if may_manage_adapter(admin, name, self._orgs).allowed
        ]

    async def show(self, admin: Principal, upstream: str) -> ReviewResult[FrontedServer]:
        verdict = may_manage_adapter(admin, upstream, self._orgs)
        if not verdict.allowed:
            return await self._done(
                admin, "upstreams.show", upstream, "", _refused("PERMISSION_DENIED", verdict.reason)
            )
        section = (await self.sections()).get(upstream)
        if section is None:
            return await self._done(admin, "upstreams.show", upstream, "", _refused("NOT_FOUND", "no such upstream"))
        return ReviewResult(code="OK", entry=await self._view(upstream, section))

    async def accept(self, admin: Principal, upstream: str, tool: str, document: Any) -> ReviewResult[FrontedServer]:
        """Store `admin`'s review of `tool` as listed now (`document`: a `ToolReview` naming the hash read)."""
        action = "upstreams.accept"
        verdict = may_manage_adapter(admin, upstream, self._orgs)
        if not verdict.allowed:
            return await self._done(admin, action, upstream, tool, _refused("PERMISSION_DENIED", verdict.reason))
        section = (await self.sections()).get(upstream)
        if section is None:
            return await self._done(admin, action, upstream, tool, _refused("NOT_FOUND", "no such upstream"))
        try:
            review = ToolReview.model_validate(document)
        except ValidationError as error:
            refused = _refused("VALIDATION_ERROR", "review refused", validation_problems(error, "review"))
            return await self._done(admin, action, upstream, tool, refused)
        listing = await self.store.listing(upstream)
        listed = {str(d.get("name")): d for d in (listing.tools if listing is not None else ())}
        definition = listed.get(tool)
        if definition is None:
            missing = _refused("NOT_FOUND", f"{upstream} does not list {tool} now: nothing to review")
            return await self._done(admin, action, upstream, tool, missing)
        if definition_hash(definition) != review.definition:
            stale = ReviewResult(
                code="CONFLICT",
                message=f"{tool} is listed with another definition than the one reviewed: review it again",
                entry=await self._view(upstream, section),
            )
            return await self._done(admin, action, upstream, tool, stale)
        await self.store.store_review(
            upstream,
            tool,
            review=review.model_dump(mode="json"),
            reviewed=definition,
            by=admin.subject,
            at_ms=self._now_ms(),
        )
        for listener in self._listeners:
            await listener(upstream)
        done = ReviewResult(
            code="OK",
            message=f"{tool} reviewed {review.mode}; served as reviewed from the next reading",
            entry=await self._view(upstream, section),
            extra={"mode": review.mode, "hash": review.definition},
        )
        return await self._done(admin, action, upstream, tool, done)

    async def _view(self, upstream: str, section: UpstreamSection) -> FrontedServer:
        listing = await self.store.listing(upstream)
        reviews, by = await self.in_force(upstream)
        stored = await self.store.reviews(upstream)
        seen = await self.store.seen(upstream)
        tools: list[FrontedTool] = []
        served = self._served()
        # The server's texts may name its own tools (as listed, and as agents are served them) freely.
        own = {str(definition.get("name", "")) for definition in listing.tools} if listing is not None else set()
        own |= {f"{upstream}_{name}" for name in own}
        for definition in listing.tools if listing is not None else ():
            name = str(definition.get("name", ""))
            listed = definition_hash(definition)
            review = reviews.get(name)
            reason = listing.held.get(name, "") if listing is not None else ""
            diff: list[str] = []
            if review is not None and review.definition != listed:
                # The definition the person read: the one accepted here, else the one last served as reviewed.
                before = stored[name].reviewed if name in stored else seen.get(name)
                if before is not None:
                    diff = definition_diff(before, definition)
            tools.append(
                FrontedTool(
                    name=name,
                    served_as=f"{upstream}_{name}",
                    state="quarantined" if reason else "served",
                    reason=reason,
                    listed_hash=listed,
                    suggestion=dict(definition.get("annotations") or {}),
                    definition=dict(definition),
                    review=review.model_dump(mode="json") if review is not None else None,
                    reviewed_by=by.get(name, ""),
                    diff=diff,
                    flags=[
                        SafetyFlag(code=flag.code, field=flag.field, excerpt=flag.excerpt)
                        for flag in review_texts(
                            strings_in("definition", definition),
                            own_tool_names=frozenset(own),
                            other_tool_names=served,
                        )
                    ],
                )
            )
        proposed = await self.store.proposed(upstream) if upstream not in self._sections else None
        fronted = section.model_dump(mode="json")
        return FrontedServer(
            name=upstream,
            transport=section.transport,
            url=section.url or "",
            proposed=dict(proposed) if proposed is not None else None,
            proposed_hash=registration_hash(proposed) if proposed is not None else None,
            attention=list(registration_attention(fronted, proposed)) if proposed is not None else [],
            protocol=listing.protocol if listing is not None else "",
            listed_at_ms=listing.at_ms if listing is not None else None,
            tools=tools,
        )

    async def _done(
        self, who: Principal, action: str, upstream: str, tool: str, result: ReviewResult[FrontedServer]
    ) -> ReviewResult[FrontedServer]:
        about = {"upstream": upstream, **({"upstream_tool": tool} if tool else {})}
        await self._audit.record(result.audit_event(who, action, about))
        return result


_ATTENTION = ("url", "token_env", "oauth")
"""What a registration names that decides which server the gateway talks to and where its credential goes."""


def registration_attention(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """The settings of `_ATTENTION` a registration changes from `before` to `after`."""
    return tuple(key for key in _ATTENTION if before.get(key) != after.get(key))


def registration_hash(section: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of a registered section, which an admin names to accept exactly the one they read."""
    return "sha256:" + hashlib.sha256(canonical_json(section).encode()).hexdigest()


class RegistrationAcceptance(BaseModel):
    """A registry admin's acceptance of an upstream registered again with another server or credential."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    hash: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    """The ``proposed_hash`` read: a registration made since is not accepted unseen."""
    acknowledge: list[str]
    """Each setting the change touches (``attention``: ``url``, ``token_env``, ``oauth``), named to say it was seen."""


def _refused(code: str, message: str, problems: tuple[str, ...] = ()) -> ReviewResult[FrontedServer]:
    return ReviewResult(code=code, message=message, problems=problems)
