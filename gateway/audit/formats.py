"""The audit trail's export formats: our own fields as JSON lines, and OCSF events for a SIEM.

Who calls it: ``countersign audit export`` and the live export to a webhook (`gateway.audit.forwarder`),
through `export_line`, so both write the same lines, whichever version the entry is stored in
(`gateway.audit.codec`): ``jsonl`` is the entry's logical event fields and its id. ``ocsf``:
OCSF (the Open Cybersecurity Schema Framework, schema 1.1.0) files an API call under the
Application Activity category (6), class API Activity (6003); ``activity_id`` says what kind of
call it was (1 Create, 2 Read, 3 Update, 4 Delete, 99 Other), ``type_uid`` is
``class_uid * 100 + activity_id``, and ``status_id`` is 1 (Success) or 2 (Failure). Our action
(``card.approve``) is ``api.operation``; the subject, org and key id are the actor; the entry's id,
sequence number and chain MAC stay in ``metadata`` and ``unmapped`` (``seq`` and ``mac``, in both
versions) so the export can still be checked against the trail. Every value is already bounded by
`gateway.audit.events.AuditEvent`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.audit.codec import decode
from gateway.audit.events import AuditEvent

__all__ = ["FORMATS", "OCSF_VERSION", "AuditExportTarget", "export_line", "to_ocsf"]

FORMATS = ("jsonl", "ocsf")

OCSF_VERSION = "1.1.0"
API_ACTIVITY = 6003
APPLICATION_ACTIVITY = 6

_ACTIVITY_BY_VERB = {
    "create": 1,
    "propose": 1,
    "register": 1,
    "list": 2,
    "show": 2,
    "read": 2,
    "call": 2,
    "tail": 2,
    "approve": 3,
    "reject": 3,
    "cancel": 3,
    "resolve": 3,
    "accept": 3,
    "update": 3,
    "revoke": 4,
    "remove": 4,
    "delete": 4,
}
_ACTIVITY_NAMES = {1: "Create", 2: "Read", 3: "Update", 4: "Delete", 99: "Other"}
_SUCCESS, _FAILURE = {"ok", "allow"}, {"deny", "error"}


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditExportTarget:
    """The ``[audit_export]`` section, resolved: where every new audit entry is posted, signed."""

    url: str
    secret: str = field(repr=False)
    """The HMAC key of the signature (`gateway.notifications.message.sign`, as for notifications)."""
    format: str = "jsonl"
    batch: int = 500
    """Most entries one POST carries."""
    poll_seconds: float = 1.0


def export_line(entry_id: str, fields: Mapping[str, str], *, format: str, product_version: str = "") -> str:
    """One entry as one line of JSON in `format` (``jsonl`` or ``ocsf``); every control character escaped
    (`json.dumps` leaves DEL alone, so it is escaped here)."""
    if format == "ocsf":
        document: dict[str, Any] = to_ocsf(entry_id, fields, product_version=product_version)
    else:
        document = {"id": entry_id, **AuditEvent.from_fields(entry_id, fields).to_fields()}
    return json.dumps(document, sort_keys=True).replace("\x7f", "\\u007f")


def to_ocsf(entry_id: str, fields: Mapping[str, str], *, product_version: str) -> dict[str, Any]:
    """The trail's entry `entry_id` (its stored `fields`, chain fields included) as one OCSF API Activity."""
    event = AuditEvent.from_fields(entry_id, fields)
    activity = _ACTIVITY_BY_VERB.get(event.action.rsplit(".", 1)[-1], 99)
    status = 1 if event.outcome in _SUCCESS else 2 if event.outcome in _FAILURE else 0
    millis = int(event.id.split("-")[0]) if event.id else 0
    found: dict[str, Any] = {
        "category_uid": APPLICATION_ACTIVITY,
        "class_uid": API_ACTIVITY,
        "activity_id": activity,
        "activity_name": _ACTIVITY_NAMES[activity],
        "type_uid": API_ACTIVITY * 100 + activity,
        "severity_id": 1,  # Informational: a SIEM's rules decide what deserves an alert
        "time": millis,
        "status_id": status,
        "status": {0: "Unknown", 1: "Success", 2: "Failure"}[status],
        "api": {"operation": event.action, "service": {"name": "countersign"}},
        "actor": {"user": {"name": event.subject, "uid": event.key_id, "org": {"name": event.org}}},
        "metadata": {
            "version": OCSF_VERSION,
            "uid": event.id,
            "product": {"name": "Countersign", "vendor_name": "Countersign", "version": product_version},
        },
        "unmapped": {k: v for k, v in decode(entry_id, fields).items() if k not in _MAPPED},
    }
    if event.code:
        found["status_code"] = event.code
    if event.reason:
        found["status_detail"] = event.reason
    if event.tool:
        found["resources"] = [{"type": "tool", "name": event.tool}]
    if event.latency_ms is not None:
        found["duration"] = int(event.latency_ms)
    return found


_MAPPED = frozenset({"action", "outcome", "subject", "org", "key_id", "tool", "code", "reason", "latency_ms"})
