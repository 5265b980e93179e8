"""The hash chain over both versions of entries: any change to what Redis holds fails the check.

The entries are written to a real Redis, old ones by the first version's script, then compact ones
by the gateway's sink, and read back as the trail reads them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.audit.chain import ChainBreak, ChainCheck, ChainHead, Checkpoint, entry_mac, head_seal
from gateway.audit.codec import is_compact
from gateway.audit.events import AUDIT_STREAM, AuditEvent
from gateway.store.audit_stream import RedisStreamAuditSink, entry_fields
from tests.support.audit_v1 import append_v1
from tests.support.examples import examples
from tests.support.services import TEST_AUDIT_SECRET

SECRET = TEST_AUDIT_SECRET.encode()
OLD, NEW, LATE = 4, 8, 2
"""Old entries, then compact ones, then old ones again (a process not yet upgraded) and compact ones."""
VERSIONS = [False] * OLD + [True] * NEW + [False] * LATE + [True] * LATE

Entry = tuple[str, dict[str, str]]
Sealed = tuple[ChainHead, str]
"""The chain head Redis keeps, and its seal."""
_written: dict[str, tuple[list[Entry], Sealed]] = {}


def _event(number: int) -> AuditEvent:
    return AuditEvent(action="card.propose" if number % 2 else "tool.call", outcome="ok", subject="ann@acme.example",
                      org="acme", key_id="key_0123456789ab", tool=f"t{number}", latency_ms=number / 7,
                      extra={"card_id": f"crd_{number % 16}_{number:032x}", "state": "PENDING"})  # fmt: skip


async def _write(url: str) -> tuple[list[Entry], Sealed]:
    client = Redis.from_url(url, decode_responses=False)
    try:
        await client.delete(AUDIT_STREAM, "{countersign:audit}:head")
        for number in range(OLD):
            await append_v1(client, SECRET, _event(number))
        sink = RedisStreamAuditSink(client, secret=SECRET)
        for number in range(OLD, OLD + NEW):
            assert await sink.record(_event(number))
        for number in range(OLD + NEW, OLD + NEW + LATE):
            await append_v1(client, SECRET, _event(number))
        for number in range(OLD + NEW + LATE, len(VERSIONS)):
            assert await sink.record(_event(number))  # its head is stale: it learns the new one and goes on
        entries = entry_fields(await client.xrange(AUDIT_STREAM))
        head = await sink.sealed_head()
        await client.delete(AUDIT_STREAM, "{countersign:audit}:head")
        return entries, head
    finally:
        await client.aclose()


def _trail(url: str) -> tuple[list[Entry], Sealed]:
    if url not in _written:
        _written[url] = anyio.run(_write, url)
    return _written[url]


def _check(entries: list[Entry], head: Sealed, checkpoints: dict[str, Checkpoint] | None = None) -> ChainBreak | None:
    check = ChainCheck(SECRET, checkpoints)
    for entry_id, fields in entries:
        check.add(entry_id, fields)
    return check.finish(*head)


def test_old_entries_then_compact_ones_verify_and_the_first_compact_one_chains_to_the_last_old_one(
    quiet_redis_url: str,
) -> None:
    """One chain across the versions: the first compact entry's MAC is computed over the last old entry."""
    entries, head = _trail(quiet_redis_url)
    assert [is_compact(fields) for _id, fields in entries] == VERSIONS
    assert _check(entries, head) is None
    (last_old_id, last_old), (_first_new_id, first_new) = entries[OLD - 1], entries[OLD]
    previous = ChainHead(mac=last_old["mac"], seq=OLD, id=last_old_id)
    assert first_new["m"] == entry_mac(SECRET, previous, OLD + 1, first_new)
    numbers = [
        int(entry_id.split("-")[1]) for (entry_id, _f), compact in zip(entries, VERSIONS, strict=True) if compact
    ]
    assert numbers == [n + 1 for n, compact in enumerate(VERSIONS) if compact]  # each one's place, in its id
    read = [AuditEvent.from_fields(entry_id, fields) for entry_id, fields in entries]
    assert [event.to_fields() for event in read] == [_event(n).to_fields() for n in range(len(VERSIONS))]


def test_a_changed_value_is_caught_by_the_mac_alone(quiet_redis_url: str) -> None:
    """Sequence numbers and ids stay right, so only the MAC check can see this change."""
    entries, head = _trail(quiet_redis_url)
    changed = [(entry_id, dict(fields)) for entry_id, fields in entries]
    changed[OLD + 2][1]["o"] = "3"  # ok -> deny
    broken = _check(changed, head)
    assert broken is not None and broken.entry_id == entries[OLD + 2][0] and broken.reason.startswith("MAC")


MUTATIONS = ["change", "drop-field", "add-field", "swap-values", "drop-entry", "swap-entries", "repeat-entry",
             "change-id"]  # fmt: skip


@settings(max_examples=examples(300), deadline=None)
@given(kind=st.sampled_from(MUTATIONS), at=st.integers(0, len(VERSIONS) - 1), pick=st.integers(0, 100),
       value=st.text(max_size=6))  # fmt: skip
def test_any_change_to_a_field_or_an_entry_fails_the_check(
    quiet_redis_url: str, kind: str, at: int, pick: int, value: str
) -> None:
    """Change, drop, add or swap any field of any entry (chain fields too), or drop, swap, repeat or
    re-time an entry, old or compact, before or after the other version: the check breaks."""
    entries, head = _trail(quiet_redis_url)
    mutated: list[Any] = [(entry_id, dict(fields)) for entry_id, fields in entries]
    entry_id, fields = mutated[at]
    names = sorted(fields)
    name = names[pick % len(names)]
    if kind == "change":
        fields[name] = value if value != fields[name] else value + "x"
    elif kind == "drop-field":
        del fields[name]
    elif kind == "add-field":
        fields[f"{value}!"] = value
    elif kind == "swap-values":
        other = next(n for n in names[pick % len(names) + 1 :] + names if fields[n] != fields[name])
        fields[name], fields[other] = fields[other], fields[name]
    elif kind == "drop-entry":
        del mutated[at]
    elif kind == "swap-entries":
        at = min(at, len(mutated) - 2)
        mutated[at], mutated[at + 1] = mutated[at + 1], mutated[at]
    elif kind == "repeat-entry":
        mutated.insert(at, mutated[at])
    else:  # the same entry a millisecond later (its sequence number unchanged)
        millis, _, seq = entry_id.partition("-")
        mutated[at] = (f"{int(millis) + 1}-{seq}", fields)
    assert _check(mutated, head) is not None


def test_the_compact_mac_is_the_first_128_bits_of_hmac_sha256_under_each_secret_in_turn() -> None:
    """The MAC is the documented HMAC-SHA256 of the documented message, whichever secret came before it:
    the keyed state `entry_mac` reuses belongs to one secret only."""
    fields = {"a": "1", "o": "1", "t": "rooms_availability", "m": "ignored", "q": "7"}
    previous = ChainHead(mac="AAAAAAAAAAAAAAAAAAAAAA", seq=6, id="1764600000000-6")
    message = json.dumps(["countersign.audit.2", previous.mac, previous.id, "7", "a", "1", "o", "1",
                          "t", "rooms_availability"], separators=(",", ":")).encode()  # fmt: skip
    for secret in (SECRET, b"another secret", SECRET):
        digest = hmac.new(secret, message, hashlib.sha256).digest()[:16]
        assert entry_mac(secret, previous, 7, fields) == base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _truncated(entries: list[Entry], keep: int) -> tuple[list[Entry], ChainHead]:
    """The trail without its newest entries past `keep`, and the head an attacker sets to its new last entry."""
    entry_id, fields = entries[keep - 1]
    mac = fields.get("m", fields.get("mac", ""))
    return entries[:keep], ChainHead(mac=mac, seq=keep, id=entry_id)


@pytest.mark.parametrize("removed", [1, 2, len(VERSIONS) - 1])
def test_removing_the_newest_entries_and_moving_the_head_back_breaks_at_the_heads_seal(
    quiet_redis_url: str, removed: int
) -> None:
    """Whoever removes the tail and sets the head to the entry now last (every value of which the stream
    shows) has no seal for it: the head's seal is an HMAC under the audit secret that no entry stores."""
    entries, (_head, seal) = _trail(quiet_redis_url)
    kept, moved = _truncated(entries, len(entries) - removed)
    for forged in ("", seal):  # no seal, or the true head's
        broken = _check(kept, (moved, forged))
        assert broken is not None and "seal" in broken.reason


def test_a_checkpoint_catches_a_truncation_even_under_a_replayed_seal(quiet_redis_url: str) -> None:
    """An attacker who saw the head (and its seal) when it was at entry 10 removes what came after and puts that
    head back: the head holds, but a checkpoint kept outside Redis saw the trail reach the end, and it fails."""
    entries, sealed = _trail(quiet_redis_url)
    kept, moved = _truncated(entries, 10)
    replayed = (moved, head_seal(SECRET, moved))
    assert _check(kept, replayed) is None  # the head alone cannot tell
    reached = {"chain-checkpoint.json": Checkpoint.of(*sealed)}
    broken = _check(kept, replayed, reached)
    assert broken is not None and "chain-checkpoint.json" in broken.reason and "removed" in broken.reason
    assert _check(entries, sealed, reached) is None


def test_a_checkpoint_naming_another_entry_or_not_sealed_under_the_secret_fails(quiet_redis_url: str) -> None:
    """A checkpoint is evidence only when the secret made it, and the entry it names must be the trail's."""
    entries, sealed = _trail(quiet_redis_url)
    head = sealed[0]
    elsewhere = ChainHead(mac="A" * 22, seq=head.seq, id=head.id)
    other = _check(entries, sealed, {"other": Checkpoint.of(elsewhere, head_seal(SECRET, elsewhere))})
    assert other is not None and "is not the one checkpoint other saw" in other.reason
    forged = _check(entries, sealed, {"forged": Checkpoint.of(head, "x")})
    assert forged is not None and "not sealed" in forged.reason
