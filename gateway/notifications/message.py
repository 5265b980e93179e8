"""Notifications to the people who can act on a card: what they say, how they are signed.

Plain data and pure functions, no I/O: the card ledger's wrapper (`gateway.notifications.card_alerts`) decides
when a card needs a notification, the outbox (`gateway.store.notification_outbox`) keeps it until it is
delivered, and the delivery loop (`gateway.notifications.delivery`) posts it. This module says what is sent.

A notification's body is JSON, in one of two shapes (`PayloadFormat`):

* ``json``: ``{"id", "event", "card": {...}, "console_url", "provenance", "untrusted": {...}}``.
  Everything outside ``untrusted`` is written by the gateway, but for the ``detail`` excerpts of
  ``provenance.flags``, which quote the agent's words; ``untrusted`` holds the card's summary
  (rendered from the agent's arguments) and the agent's own words, which a receiver must show as such.
  ``provenance`` is the card's (`gateway.provenance`), null for a card stored without one.
* ``slack``: ``{"text", "blocks"}`` for a Slack incoming webhook (or anything that speaks its
  format). The agent's words and the summary appear only inside a quoted section, with Slack's
  control characters escaped so they cannot mention, link or format anything.

Every body is signed (`sign`): ``v1=`` and the hex HMAC-SHA256, keyed with the webhook's secret,
of ``<timestamp>.<body>``, sent with the timestamp in ``X-Countersign-Timestamp`` and the id in
``X-Countersign-Notification-Id``. A receiver recomputes it (`verify`) and refuses a timestamp
far from its own clock: the README shows it in a few lines.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from gateway.cards.card import Card, CardState

__all__ = [
    "ID_HEADER",
    "NOTIFIED_STATES",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Notification",
    "NotificationEvent",
    "NotificationQueue",
    "NotificationSettings",
    "PayloadFormat",
    "Webhook",
    "card_url",
    "notification_id",
    "render",
    "sign",
    "signed_headers",
    "verify",
]

TIMESTAMP_HEADER = "X-Countersign-Timestamp"
SIGNATURE_HEADER = "X-Countersign-Signature"
ID_HEADER = "X-Countersign-Notification-Id"


class NotificationEvent(StrEnum):
    """Why people are told: a card waits for a decision, or a write ended where a person must look."""

    PENDING = "card.pending"
    FAILED = "card.failed"
    UNKNOWN = "card.unknown"
    NEEDS_RECONCILIATION = "card.needs_reconciliation"
    EXPIRING = "card.expiring"
    """Not a state: a PENDING card near its decide-by, announced once (`gateway.notifications.expiry_warnings`)."""


NOTIFIED_STATES: Mapping[CardState, NotificationEvent] = {
    CardState.PENDING: NotificationEvent.PENDING,
    CardState.FAILED: NotificationEvent.FAILED,
    CardState.UNKNOWN: NotificationEvent.UNKNOWN,
    CardState.NEEDS_RECONCILIATION: NotificationEvent.NEEDS_RECONCILIATION,
}
"""The card states a notification is sent for, and the event each one is."""


class PayloadFormat(StrEnum):
    JSON = "json"
    SLACK = "slack"


@dataclass(frozen=True, kw_only=True, slots=True)
class Webhook:
    """One configured receiver (``[notifications.webhooks.<name>]``)."""

    name: str
    url: str
    secret: str = field(repr=False)
    """The HMAC key the receiver verifies bodies with. Never logged, never sent."""
    format: PayloadFormat = PayloadFormat.JSON
    orgs: frozenset[str] = frozenset({"*"})
    """The requester orgs whose cards it hears of; ``*`` is every org."""
    approver_roles: frozenset[str] = frozenset({"*"})
    """The approver roles (a tool's `Approval.role`) whose cards it hears of; ``*`` is every role."""
    events: frozenset[NotificationEvent] = frozenset(NotificationEvent)

    def wants(self, card: Card, event: NotificationEvent) -> bool:
        """Whether this receiver is told of `event` on `card`: its org, its approver role, its events."""
        return (
            event in self.events
            and ("*" in self.orgs or card.requester_org in self.orgs)
            and ("*" in self.approver_roles or card.approver_role in self.approver_roles)
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class NotificationSettings:
    """The ``[notifications]`` section, resolved (secrets read from the environment)."""

    console_url: str = "http://127.0.0.1:8765"
    """Where approvers reach the gateway: card links are ``<console_url>/admin/#/cards/<id>``."""
    webhooks: tuple[Webhook, ...] = ()
    max_attempts: int = 10
    """Attempts per notification before it is abandoned (audited as ``notification.abandoned``)."""
    retry_base_seconds: float = 1.0
    """The first retry's delay; each further one doubles it, up to `retry_cap_seconds`."""
    retry_cap_seconds: float = 300.0
    timeout_seconds: float = 5.0
    """A receiver's deadline per attempt."""
    poll_seconds: float = 1.0
    """How often `serve` and `worker` look for due notifications (and for cards about to expire)."""
    expiry_warning_seconds: float = 900.0
    """A PENDING card is announced as expiring this long before its decide-by (or at half its decision
    window, when that is shorter); 0 announces nothing."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Notification:
    """One delivery to one webhook, as the outbox keeps it. `body` is the exact bytes that are signed."""

    id: str
    webhook: str
    body: str
    attempts: int = 0


class NotificationQueue(Protocol):
    """Where notifications wait for delivery (`gateway.store.notification_outbox.RedisNotificationOutbox`)."""

    async def enqueue(self, notification: Notification) -> bool:
        """Keep `notification` until delivered; False when its id was enqueued before.

        Raises:
            StoreUnavailableError: the store cannot be reached.
        """
        ...


def notification_id(card_id: str, event: NotificationEvent, webhook: str) -> str:
    """The same card, event and receiver always give the same id: a replayed enqueue is one notification,
    and a receiver dedupes redeliveries on it."""
    digest = hashlib.sha256(f"{card_id}|{event.value}|{webhook}".encode()).hexdigest()[:32]
    return f"ntf_{digest}"


def card_url(console_url: str, card_id: str) -> str:
    """The card's page in the admin console (``/admin/#/cards/<id>``, as the console routes it)."""
    return f"{console_url.rstrip('/')}/admin/#/cards/{card_id}"


def render(card: Card, event: NotificationEvent, *, webhook: Webhook, console_url: str) -> Notification:
    """The notification of `event` on `card` for `webhook`, its body in the webhook's format."""
    nid = notification_id(card.card_id, event, webhook.name)
    url = card_url(console_url, card.card_id)
    if webhook.format is PayloadFormat.SLACK:
        body: dict[str, Any] = _slack(card, event, url)
    else:
        body = {
            "id": nid,
            "event": event.value,
            "card": {
                "card_id": card.card_id,
                "tool": card.tool,
                "state": card.state.value,
                "org": card.requester_org,
                "requester": card.requester_subject,
                "approver_role": card.approver_role,
                "approvals_required": card.approvals_required,
                "approvals": len(card.approvers),
                "created_ms": card.created_ms,
                "decide_by_ms": card.decide_by_ms,
            },
            "console_url": url,
            "provenance": None if card.provenance is None else card.provenance.model_dump(mode="json"),
            "untrusted": {"summary": card.summary, "agent_text": dict(card.agent_text)},
        }
    return Notification(id=nid, webhook=webhook.name, body=json.dumps(body, sort_keys=True, separators=(",", ":")))


_HEADLINES = {
    NotificationEvent.PENDING: "A card waits for your decision",
    NotificationEvent.FAILED: "A write failed",
    NotificationEvent.UNKNOWN: "A write's outcome is unknown; a status query is under way",
    NotificationEvent.NEEDS_RECONCILIATION: "A write needs reconciliation by a person",
    NotificationEvent.EXPIRING: "A card expires soon without a decision",
}


def _slack(card: Card, event: NotificationEvent, url: str) -> dict[str, Any]:
    # Everything outside the quote is the gateway's own text; tool names, orgs and subjects are
    # escaped too, since an org or a subject is chosen by whoever minted the key.
    who = f"{_mrkdwn(card.requester_subject)} ({_mrkdwn(card.requester_org)})"
    headline = f"{_HEADLINES[event]}: {_mrkdwn(card.tool)} for {who}"
    provenance = card.provenance
    if provenance is not None and provenance.tainted:
        headline = f"TAINTED (its requester was shown third-party text). {headline}"
    if provenance is not None and provenance.data_flow:
        headline += ". Possible data flow: private data may go where others see it"
    lines = [_mrkdwn(card.summary), *(f"{_mrkdwn(k)}: {_mrkdwn(v)}" for k, v in sorted(card.agent_text.items()))]
    quoted = "\n".join(f"&gt; {line}" for line in lines if line) or "&gt; -"
    return {
        "text": f"{headline}. <{url}|Open the card>",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{headline}*\n{_status_line(card)}"}},
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"_Written by the requesting agent, not verified:_\n{quoted}"},
            },
            {
                "type": "actions",
                "elements": [{"type": "button", "text": {"type": "plain_text", "text": "Open the card"}, "url": url}],
            },
        ],
    }


def _status_line(card: Card) -> str:
    """The card's state, and, while it waits for a decision, when it expires (UTC, ISO 8601)."""
    line = f"State: `{card.state.value}`"
    if card.state is CardState.PENDING:
        decide_by = datetime.fromtimestamp(card.decide_by_ms / 1000, tz=UTC).isoformat(timespec="seconds")
        line += f" · decide by {decide_by}"
    return line


def _mrkdwn(text: str) -> str:
    """`text` with Slack's control characters escaped (no links, mentions or channel pings), the
    formatting marks neutralised, and one line (a newline could end the quote)."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("`", "\u02bc")
    for mark in ("*", "_", "~"):
        escaped = escaped.replace(mark, f"\u200b{mark}\u200b")  # a zero-width space on each side: not a mark
    return " ".join(escaped.split())


def sign(secret: str, timestamp: int, body: str) -> str:
    """``v1=`` and the hex HMAC-SHA256 of ``<timestamp>.<body>`` under `secret`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256)
    return f"v1={mac.hexdigest()}"


def verify(secret: str, timestamp: int, body: str, signature: str, *, now: int, tolerance_seconds: int = 300) -> bool:
    """A receiver's check: the signature matches and the timestamp is within `tolerance_seconds` of `now`."""
    if abs(now - timestamp) > tolerance_seconds:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


def signed_headers(
    delivery_id: str, body: str, secret: str, timestamp: int, *, content_type: str = "application/json"
) -> dict[str, str]:
    """The headers of one delivery attempt: a fresh timestamp each attempt, the id never changing.
    Notifications and the live audit export (`gateway.audit.forwarder`) are signed alike."""
    return {
        "Content-Type": content_type,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, timestamp, body),
        ID_HEADER: delivery_id,
    }
