"""The audit trail's vocabulary: an event, the sink Protocol, and an in-memory sink.

Who calls it: the executor (one event per call), the key store, the CLI (`audit tail`). An
event never holds a bearer token or third-party text; `AuditEvent` has no field for either.
The Redis stream that holds the trail is `gateway.store.audit_stream.RedisStreamAuditSink`.

Some fields still hold what an agent chose (the name of the tool it called), so an event bounds
every field when it is made (`MAX_FIELD_CHARS`), and whoever renders one as text escapes it
(`gateway.printable`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.audit.codec import decode, encode
from gateway.principal import Principal

__all__ = ["AUDIT_STREAM", "MAX_FIELD_CHARS", "AuditEvent", "AuditSink", "ListAuditSink", "bounded"]

logger = logging.getLogger(__name__)

AUDIT_STREAM = "countersign:audit"
MAX_FIELD_CHARS = 512
"""The longest value an audit field holds, in characters: each text field, and each key and value of
`extra`. A longer value is kept as its prefix plus a marker naming its length and SHA-256 (`bounded`)."""


def bounded(value: str) -> str:
    """`value` as an audit field stores it: at most `MAX_FIELD_CHARS` characters, and encodable as UTF-8.

    A longer value keeps its first characters and ends in ``…[<n> chars, sha256 <32 hex>]``, so two
    long values with one prefix are still told apart. Lone surrogates (which UTF-8 cannot carry)
    are written as ``\\udXXX`` escapes rather than failing the write.
    """
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            value = value.encode("utf-8", "backslashreplace").decode()
    if len(value) <= MAX_FIELD_CHARS:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:32]
    marker = f"…[{len(value)} chars, sha256 {digest}]"
    return value[: MAX_FIELD_CHARS - len(marker)] + marker


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditEvent:
    """One audited fact. Every text field, and each key and value of `extra`, is `bounded` on construction."""

    action: str
    """What happened: ``tool.call``, ``key.create``, ``key.revoke``, ``auth.reject``..."""
    outcome: str
    """``allow``, ``deny``, ``ok`` or ``error``."""
    subject: str = ""
    org: str = ""
    key_id: str = ""
    tool: str = ""
    code: str = ""
    """Stable code of a refusal or failure; empty on success."""
    reason: str = ""
    """Why, for operators. Written by the gateway; never an agent's words. It may carry a backend's
    refusal code (one machine word, e.g. ``slot_taken``), which people read and the model never sees."""
    latency_ms: float | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    id: str = ""
    """Stream id once stored (its first part is the Redis server's time in ms, as the appending process knows it)."""

    def __post_init__(self) -> None:
        for name in _TEXT_FIELDS:
            value = getattr(self, name)
            if len(value) > MAX_FIELD_CHARS or not value.isascii():
                object.__setattr__(self, name, bounded(value))
        if self.extra:
            object.__setattr__(self, "extra", {bounded(k): bounded(v) for k, v in self.extra.items()})

    def to_fields(self) -> dict[str, str]:
        """The logical fields: each non-empty text field under its name, ``latency_ms``, ``extra`` as JSON."""
        # Plain attribute reads: dataclasses.asdict deep-copies and costs more than the XADD's encoding.
        fields = {name: value for name in _TEXT_FIELDS if (value := getattr(self, name))}
        if self.latency_ms is not None:
            fields["latency_ms"] = f"{self.latency_ms:.3f}"
        if self.extra:
            fields["extra"] = json.dumps(dict(self.extra), sort_keys=True)
        return fields

    def to_stored(self) -> dict[str, str]:
        """The fields as the stream stores them (the compact form of `gateway.audit.codec`), without the chain's."""
        return encode(
            action=self.action,
            outcome=self.outcome,
            subject=self.subject,
            org=self.org,
            key_id=self.key_id,
            tool=self.tool,
            code=self.code,
            reason=self.reason,
            latency_ms=self.latency_ms,
            extra=self.extra,
        )

    @classmethod
    def refusal(
        cls, who: Principal, action: str, code: str, reason: str, extra: Mapping[str, str] | None = None
    ) -> AuditEvent:
        """A request refused before it reached a service (a malformed body, a missing role)."""
        return cls.by(who, action=action, outcome="deny", code=code, reason=reason, extra=extra)

    @classmethod
    def by(
        cls,
        who: Principal,
        *,
        action: str,
        outcome: str,
        tool: str = "",
        code: str = "",
        reason: str = "",
        latency_ms: float | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> AuditEvent:
        """An event of something `who` did (its subject, org and key)."""
        return cls(
            action=action,
            outcome=outcome,
            subject=who.subject,
            org=who.org,
            key_id=who.key_id,
            tool=tool,
            code=code,
            reason=reason,
            latency_ms=latency_ms,
            extra=extra or {},
        )

    @classmethod
    def from_fields(cls, event_id: str, fields: Mapping[str, str]) -> AuditEvent:
        """The event of the entry `event_id`, from its logical fields or its stored ones in either version."""
        fields = decode(event_id, fields)
        latency = fields.get("latency_ms")
        return cls(
            action=fields.get("action", ""),
            outcome=fields.get("outcome", ""),
            subject=fields.get("subject", ""),
            org=fields.get("org", ""),
            key_id=fields.get("key_id", ""),
            tool=fields.get("tool", ""),
            code=fields.get("code", ""),
            reason=fields.get("reason", ""),
            latency_ms=float(latency) if latency else None,
            extra=json.loads(fields["extra"]) if "extra" in fields else {},
            id=event_id,
        )


_TEXT_FIELDS = ("action", "outcome", "subject", "org", "key_id", "tool", "code", "reason")


class AuditSink(Protocol):
    """Where audit events go. `record` never raises; it says whether the event is in the trail."""

    async def record(self, event: AuditEvent) -> bool:
        """Append `event`. True when it is in the trail; False when the trail could not take it (the
        event then goes to the process log) — a caller that must not act unaudited refuses on False
        (ARCHITECTURE invariant 7: no read is served that cannot be audited)."""
        ...

    async def recent(self, count: int) -> Sequence[AuditEvent]:
        """The newest `count` events, oldest first."""
        ...


class ListAuditSink:
    """In-memory sink for executor tests: keeps events in order."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def record(self, event: AuditEvent) -> bool:
        self.events.append(event)
        return True

    async def recent(self, count: int) -> list[AuditEvent]:
        return self.events[-count:]
