"""How an audit entry is stored in the stream, in both versions of the chain, and the one reader of both.

Who uses it: `gateway.audit.events.AuditEvent` (`to_stored` writes the compact form through `encode`,
`from_fields` reads either form through `decode`), and `gateway.audit.chain` (which form an entry
is in, and its sequence number). So everything that reads entries (the tail, the export, the
archive's readers, the metrics of a test) gets the same logical fields, whatever the form.

**Version 1** (every entry written before the compact form): the event's fields under their own
names, ``extra`` as one JSON object, ``seq`` and ``mac`` (64 hex digits). It is read as it is.

**Version 2**, the compact form, chosen for size (bench/HISTORY.md, ``card_bytes.py``):

* **One-letter names** (`encode` and `decode` list them); each ``extra`` key is a field of its
  own, named ``.`` + the key.
* **Codes for the gateway's own words**: an action of `ACTIONS` or an outcome of `OUTCOMES` is its
  number (``a``, ``o``), any other action or outcome is text under ``A`` or ``O``. A code is never
  renumbered or reused: entries already stored keep their meaning.
* **Ids of the gateway's own shapes as bytes**: a key id ``key_`` + 12 hex digits (``k``) and an
  ``extra`` ``card_id`` ``crd_<shard>_`` + 32 hex digits (``i``: the shard, then base64url) lose
  their fixed text; a value of any other shape is stored as it is (``K``, ``.card_id``). The
  ``existing`` and ``state`` of a proposal are numbers too (`CODED_EXTRA`: ``e``, ``z``).
* **Latency in whole microseconds** (``l``), the precision version 1 wrote (``%.3f`` ms).
* **Nothing derivable, no defaults**: an empty field is left out, and there is no ``seq`` field:
  the sequence number is the second part of the entry's stream id (``<ms>-<seq>``), or ``q`` when
  the stream already held a later id (`gateway.store.audit_stream`). The MAC ``m`` is 128 bits in
  base64url (`gateway.audit.chain`).

An entry is in the compact form when it has ``m``. A stored name this module does not know (one a
later version adds) is read back under that name.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
from collections.abc import Mapping

__all__ = ["ACTIONS", "CHAIN_NAMES", "CODED_EXTRA", "OUTCOMES", "decode", "encode", "entry_seq", "is_compact"]

ACTIONS: dict[str, str] = {
    "tool.call": "1",
    "card.propose": "2",
    "card.approve": "3",
    "card.reject": "4",
    "card.cancel": "5",
    "card.execute": "6",
    "card.resolve": "7",
    "card.reconcile": "8",
    "card.batch": "9",
    "auth.reject": "10",
    "auth.throttle": "11",
    "auth.scope": "12",
    "http.request": "13",
    "mcp.session": "14",
    "mcp.reject": "15",
    "key.create": "16",
    "key.revoke": "17",
}
"""The actions stored as numbers. Append only: a stored code must keep its action forever."""
OUTCOMES: dict[str, str] = {"ok": "1", "allow": "2", "deny": "3", "error": "4"}
"""The outcomes stored as numbers. Append only."""

CODED_EXTRA: dict[str, tuple[str, dict[str, str]]] = {
    "existing": ("e", {"false": "0", "true": "1"}),
    "state": (
        "z",
        {
            "PENDING": "1",
            "APPROVED": "2",
            "EXECUTING": "3",
            "SUCCEEDED": "4",
            "FAILED": "5",
            "UNKNOWN": "6",
            "NEEDS_RECONCILIATION": "7",
            "REJECTED": "8",
            "CANCELLED": "9",
            "EXPIRED": "10",
        },
    ),
}
"""``extra`` keys of every proposal whose usual values are numbers: key -> (stored name, value -> code).
A value not in its table is stored as it is, under ``.`` + the key. Append only."""

_EXTRA_OF = {
    short: (name, {code: value for value, code in codes.items()}) for name, (short, codes) in CODED_EXTRA.items()
}
_ACTION_OF = {code: action for action, code in ACTIONS.items()}
_OUTCOME_OF = {code: outcome for outcome, code in OUTCOMES.items()}
_TEXT_OF = {"s": "subject", "g": "org", "t": "tool", "c": "code", "r": "reason"}
"""Text fields stored as they are, under one letter."""
_KEY_ID = re.compile(r"key_([0-9a-f]{12})")
_CARD_ID = re.compile(r"crd_([0-9]{1,2})_([0-9a-f]{32})")
CHAIN_NAMES = frozenset({"m", "q"})
"""Names the chain adds to a compact entry (its MAC, and its sequence number when not in its id)."""


def encode(
    *,
    action: str,
    outcome: str,
    subject: str,
    org: str,
    key_id: str,
    tool: str,
    code: str,
    reason: str,
    latency_ms: float | None,
    extra: Mapping[str, str],
) -> dict[str, str]:
    """An event's compact stored fields, without the chain's (`decode` gives back the logical fields)."""
    stored: dict[str, str] = {}
    if action in ACTIONS:
        stored["a"] = ACTIONS[action]
    elif action:
        stored["A"] = action
    if outcome in OUTCOMES:
        stored["o"] = OUTCOMES[outcome]
    elif outcome:
        stored["O"] = outcome
    if subject:
        stored["s"] = subject
    if org:
        stored["g"] = org
    if key_id:
        name, value = _stored_key_id(key_id)
        stored[name] = value
    if tool:
        stored["t"] = tool
    if code:
        stored["c"] = code
    if reason:
        stored["r"] = reason
    if latency_ms is not None:
        if math.isfinite(latency_ms):
            stored["l"] = str(round(latency_ms * 1000))
        else:
            stored["L"] = f"{latency_ms:.3f}"
    for name, value in extra.items():
        if name == "card_id" and (found := _CARD_ID.fullmatch(value)):
            stored["i"] = found[1] + _pack(found[2])
        elif name in CODED_EXTRA and value in CODED_EXTRA[name][1]:
            short, codes = CODED_EXTRA[name]
            stored[short] = codes[value]
        else:
            stored[f".{name}"] = value
    return stored


def is_compact(stored: Mapping[str, str]) -> bool:
    """Whether `stored` is a version 2 entry."""
    return "m" in stored


def entry_seq(entry_id: str, stored: Mapping[str, str]) -> str:
    """The entry's sequence number as stored (text; ``""`` when it has none): ``seq``, ``q`` or its id's."""
    if not is_compact(stored):
        return stored.get("seq", "")
    return stored.get("q") or entry_id.partition("-")[2]


def decode(entry_id: str, stored: Mapping[str, str]) -> dict[str, str]:
    """The logical fields of the entry `entry_id` stored as `stored`, in either version: the event's
    fields under their own names (``extra`` as JSON), ``seq`` and ``mac``.

    A value that is not what its version writes (an entry changed in Redis) is read as it is stored;
    `gateway.audit.chain` is what says it was changed."""
    if not is_compact(stored):
        return dict(stored)
    logical: dict[str, str] = {}
    extra: dict[str, str] = {}
    for name, value in stored.items():
        if name.startswith("."):
            extra[name[1:]] = value
        elif name in _EXTRA_OF:
            key, values = _EXTRA_OF[name]
            extra[key] = values.get(value, value)
        elif name in _TEXT_OF:
            logical[_TEXT_OF[name]] = value
        elif name == "a" or name == "A":
            logical["action"] = _ACTION_OF.get(value, value) if name == "a" else value
        elif name == "o" or name == "O":
            logical["outcome"] = _OUTCOME_OF.get(value, value) if name == "o" else value
        elif name == "k":
            unpacked = _unpack(value, 6)
            logical["key_id"] = f"key_{unpacked}" if unpacked else value
        elif name == "K":
            logical["key_id"] = value
        elif name == "l":
            logical["latency_ms"] = f"{int(value) / 1000:.3f}" if _is_int(value) else value
        elif name == "L":
            logical["latency_ms"] = value
        elif name == "i":
            unpacked = _unpack(value[-22:], 16)
            shard = value[:-22]
            extra["card_id"] = f"crd_{shard}_{unpacked}" if unpacked and _is_digits(shard) else value
        elif name == "m":
            logical["mac"] = value
        elif name != "q":
            logical[name] = value
    if extra:
        logical["extra"] = json.dumps(extra, sort_keys=True)
    logical["seq"] = entry_seq(entry_id, stored)
    return logical


@functools.lru_cache(maxsize=4096)
def _stored_key_id(key_id: str) -> tuple[str, str]:
    # Cached: a caller's key id is in every event of its calls.
    found = _KEY_ID.fullmatch(key_id)
    return ("k", _pack(found[1])) if found else ("K", key_id)


def _pack(hex_digits: str) -> str:
    return base64.urlsafe_b64encode(bytes.fromhex(hex_digits)).rstrip(b"=").decode()


def _unpack(text: str, size: int) -> str | None:
    """The hex digits `_pack` made `text` from (`size` bytes), or None when it did not make it."""
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    digits = raw.hex()
    return digits if len(raw) == size and _pack(digits) == text else None


def _is_int(text: str) -> bool:
    return _is_digits(text.removeprefix("-"))


def _is_digits(text: str) -> bool:
    """ASCII digits only (`str.isdigit` also takes ``²``, which `int` refuses)."""
    return text.isascii() and text.isdigit()
