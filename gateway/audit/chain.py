"""The audit trail's hash chain: how each entry's MAC is made, and how a whole trail is checked.

Every entry of the global audit stream has a sequence number (1, 2, 3... in order of appending) and
a MAC, an HMAC-SHA256 under the gateway's audit secret of the previous entry's MAC, the previous
entry's stream id, its own sequence number and its fields. So changing a field, deleting an entry,
inserting one or reordering two breaks the chain at that entry, and an entry's stream id (its time)
is covered by the next entry's MAC (the last one's by the chain head kept beside the stream).
Without the secret nobody can forge a MAC; the secret is never printed.

Two versions share one chain, entry by entry (`gateway.audit.codec` says how each is stored), so a
stream written before the compact form goes on in it, and the first compact entry chains to the
last old one (an older process still appending old entries chains to compact ones the same way):

* version 1 stores ``seq`` and ``mac``, the full 256 bits as 64 hex digits, over the event's fields
  (`legacy_entry_mac`);
* version 2 (`entry_mac`) keeps the sequence number in the stream id and stores ``m``: the first
  128 bits of the HMAC, base64url (22 characters). 128 bits is the truncation RFC 4868 uses for
  HMAC-SHA-256 and is within NIST SP 800-107 Rev. 1 (section 5.3.3): a forger's chance per try is
  2^-128, and a try can only be judged by someone holding the secret, when the trail is verified.
  The MAC covers every stored field but ``m`` and ``q``, in name order, and the sequence number.

The tail is protected twice, since removing the newest entries and moving the head back to the last one
kept would otherwise leave a chain that holds. The head Redis keeps is *sealed*: beside the newest entry's
MAC and number it holds `head_seal`, an HMAC under the same secret of those two that no entry stores, so
only a process holding the secret can set the head. And the head is *checkpointed* outside Redis: the
archiver writes the sealed head to the archive directory on every pass, and ``audit export --checkpoint``
to a file of the operator's; each `Checkpoint` says "the trail reached this entry, with this MAC", and a
trail that now ends before one of them, or holds another entry there, has lost its tail.

Pure computation: the store appends (`gateway.store.audit_stream`), the trail reader feeds `ChainCheck`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.audit.codec import CHAIN_NAMES, entry_seq, is_compact

__all__ = [
    "CHAIN_FIELDS",
    "GENESIS",
    "ChainBreak",
    "ChainCheck",
    "ChainHead",
    "Checkpoint",
    "entry_mac",
    "head_seal",
    "legacy_entry_mac",
    "stream_id",
]

CHAIN_FIELDS = frozenset({"seq", "mac"})
"""Fields the chain adds to a version 1 entry; every other field is the event's and is covered by the MAC."""
_VERSION_2 = "countersign.audit.2"
_HEAD = "countersign.audit.head"
"""The first item of a head seal's message: no seal is an entry's MAC, nor the reverse."""
"""The first item of every version 2 MAC's message: no message of one version is one of the other."""
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""Built once: `json.dumps` with options builds an encoder per call."""


@dataclass(frozen=True, slots=True)
class ChainHead:
    """The newest entry of a chain: what the next entry's MAC is computed from. ``GENESIS`` before any."""

    mac: str = ""
    seq: int = 0
    id: str = ""


GENESIS = ChainHead()


def entry_mac(secret: bytes, previous: ChainHead, seq: int, fields: Mapping[str, str]) -> str:
    """The MAC of the compact entry numbered `seq` with stored `fields`, appended after `previous`."""
    # A JSON array of strings (names sorted, each followed by its value) parses one way only.
    message = [_VERSION_2, previous.mac, previous.id, str(seq)]
    for name in sorted(fields):
        if name not in CHAIN_NAMES:
            message += (name, fields[name])
    keyed = _keyed(secret).copy()
    keyed.update(_JSON.encode(message).encode())
    return base64.urlsafe_b64encode(keyed.digest()[:16]).rstrip(b"=").decode()


@functools.lru_cache(maxsize=8)
def _keyed(secret: bytes) -> hmac.HMAC:
    """An HMAC-SHA256 keyed with `secret` and fed nothing yet, to copy per entry: keying one costs OpenSSL 3
    more than the whole MAC of an entry (hmac.digest looks the digest up and keys it on every call)."""
    return hmac.new(secret, digestmod=hashlib.sha256)


def head_seal(secret: bytes, head: ChainHead) -> str:
    """The seal of a chain head: an HMAC of its newest entry's MAC and sequence number that no entry holds,
    so the head cannot be moved back to an earlier entry by someone without the secret. (Not its id: the
    next entry's MAC covers that.)"""
    keyed = _keyed(secret).copy()
    keyed.update(_JSON.encode([_HEAD, head.mac, str(head.seq)]).encode())
    return base64.urlsafe_b64encode(keyed.digest()[:16]).rstrip(b"=").decode()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A sealed chain head kept outside Redis: the trail reached entry `seq`, whose MAC was `mac`."""

    seq: int
    mac: str
    id: str
    seal: str
    """`head_seal` of (`mac`, `seq`): a checkpoint nobody holding the secret made is refused."""

    @classmethod
    def of(cls, head: ChainHead, seal: str) -> Checkpoint:
        return cls(seq=head.seq, mac=head.mac, id=head.id, seal=seal)

    def to_json(self) -> str:
        return json.dumps({"seq": self.seq, "mac": self.mac, "id": self.id, "seal": self.seal}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        """Raises `ValueError` for text that is not a checkpoint."""
        try:
            data = json.loads(text)
            checkpoint = cls(seq=int(data["seq"]), mac=str(data["mac"]), id=str(data["id"]), seal=str(data["seal"]))
        except (KeyError, TypeError, json.JSONDecodeError) as error:
            raise ValueError("not an audit checkpoint") from error
        return checkpoint

    def sealed(self, secret: bytes) -> bool:
        expected = head_seal(secret, ChainHead(mac=self.mac, seq=self.seq, id=self.id))
        return hmac.compare_digest(self.seal.encode(), expected.encode())


def legacy_entry_mac(secret: bytes, previous: ChainHead, seq: int, fields: Mapping[str, str]) -> str:
    """The MAC of a version 1 entry numbered `seq` with event `fields`, appended after `previous`."""
    event = {name: value for name, value in fields.items() if name not in CHAIN_FIELDS}
    message = json.dumps(
        {"prev": previous.mac, "prev_id": previous.id, "seq": seq, "fields": event},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first entry where a trail stops being the one the gateway wrote."""

    entry_id: str
    position: int
    """1-based position of the entry in the trail as read (archive first, then the stream)."""
    reason: str


class ChainCheck:
    """Checks a trail one entry at a time, in order, from the first entry ever appended.

    Feed every entry to `add` (archive first, then the stream), then call `finish` with the head
    Redis keeps; the first break found is kept in `broken`, and later entries are not judged.
    """

    def __init__(self, secret: bytes, checkpoints: Mapping[str, Checkpoint] | None = None) -> None:
        """`checkpoints`: heads the trail is known to have reached, by where each was kept (a file's name)."""
        self._secret = secret
        self._checkpoints = dict(checkpoints or {})
        self._reached: dict[int, str] = {checkpoint.seq: "" for checkpoint in self._checkpoints.values()}
        """The MAC of each checkpointed entry, once the replay passes it."""
        self.head = GENESIS
        self.count = 0
        self.broken: ChainBreak | None = None

    def add(self, entry_id: str, fields: Mapping[str, str]) -> None:
        if self.broken is not None:
            return
        self.count += 1
        compact = is_compact(fields)
        seq_text, mac = entry_seq(entry_id, fields), fields.get("m" if compact else "mac", "")
        expected_seq = self.head.seq + 1
        if not (seq_text.isascii() and seq_text.isdigit()) or int(seq_text) != expected_seq:
            self._break(
                entry_id,
                f"sequence number {seq_text or 'missing'}, expected {expected_seq}: "
                "an entry before it was removed or moved, or this one was added",
            )
        elif not _after(entry_id, self.head.id):
            self._break(entry_id, f"stream id not after the previous entry's ({self.head.id})")
        elif not hmac.compare_digest(
            mac.encode(),
            (entry_mac if compact else legacy_entry_mac)(self._secret, self.head, expected_seq, fields).encode(),
        ):
            self._break(entry_id, "MAC does not match: the entry or the one before it was changed")
        else:
            self.head = ChainHead(mac=mac, seq=expected_seq, id=entry_id)
            if expected_seq in self._reached:
                self._reached[expected_seq] = mac

    def finish(self, stored: ChainHead, seal: str = "") -> ChainBreak | None:
        """The first break, including a trail whose newest entries were removed: `stored` (the head Redis keeps)
        is ahead of the replay, or is not sealed under the secret (`seal`), or a checkpoint is ahead of it."""
        if self.broken is not None:
            return self.broken
        last = self.head.id or "(none)"
        if stored != self.head:
            self._break(last, f"the trail ends at sequence {self.head.seq}, the chain head is at {stored.seq}")
        elif stored != GENESIS and not hmac.compare_digest(seal.encode(), head_seal(self._secret, stored).encode()):
            self._break(last, "the chain head's seal does not match: it was set without the audit secret")
        for where, checkpoint in sorted(self._checkpoints.items()):
            if self.broken is not None:
                break
            if not checkpoint.sealed(self._secret):
                self._break(last, f"checkpoint {where} is not sealed under the audit secret")
            elif self.head.seq < checkpoint.seq:
                self._break(
                    last,
                    f"the trail ends at sequence {self.head.seq}, but checkpoint {where} saw it reach "
                    f"{checkpoint.seq}: its newest entries were removed",
                )
            elif not hmac.compare_digest(self._reached.get(checkpoint.seq, "").encode(), checkpoint.mac.encode()):
                self._break(last, f"entry {checkpoint.seq} is not the one checkpoint {where} saw")
        return self.broken

    def _break(self, entry_id: str, reason: str) -> None:
        self.broken = ChainBreak(entry_id=entry_id, position=self.count, reason=reason)


def _after(entry_id: str, previous_id: str) -> bool:
    if not previous_id:
        return True
    try:
        return stream_id(entry_id) > stream_id(previous_id)
    except ValueError:
        return False


def stream_id(entry_id: str) -> tuple[int, int]:
    """A stream id as a comparable pair. Raises `ValueError` for text that is not one."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)
