"""Card retention against a real Redis and a real archive directory: which cards leave, and that none is lost."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.archives.card_archive import CardArchive
from gateway.cards.card import TERMINAL, CardState, verify_chain
from gateway.errors import CardArchiveError
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.ledger.codec import event_from_fields
from gateway.store.ledger.layout import card_keys, open_buckets, org_index, requester_index
from gateway.store.ledger.redis_ledger import RedisLedger, card_shard
from gateway.store.ledger.retention import LOCK_KEY, RETIRE, RedisCardRetention
from tests.support.cards import PROPOSAL
from tests.support.examples import examples
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

KEEP_MS = 300
"""The retention of these tests: long enough to file a batch of cards inside it, short enough to wait out."""
REQUESTERS = (("acme", "alice@acme.example"), ("acme", "bob@acme.example"), ("globex", "gina@globex.example"))


@pytest.fixture(scope="module", name="redis_url")
def retention_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest)."""
    return quiet_redis_url


async def _to(ledger: RedisLedger, state: CardState, n: int, requester: tuple[str, str] = REQUESTERS[0]) -> str:
    """A new card, driven through the real scripts to `state`."""
    org, subject = requester
    proposal = replace(PROPOSAL, dedupe_key=f"retention|{n}", requester_org=org, requester_subject=subject,
                       decide_within_ms=40 if state is CardState.EXPIRED else 60_000)  # fmt: skip
    created = await ledger.propose(proposal)
    assert created.card is not None, created.status
    card_id, card = created.card.card_id, created.card
    if state is CardState.PENDING:
        return card_id
    if state is CardState.EXPIRED:
        with anyio.fail_after(5):  # the worker's sweep of a due timer, by hand
            while (await ledger.sweep_open(card_id, requeue_ms=1000)).card.state is not CardState.EXPIRED:  # type: ignore[union-attr]
                await anyio.sleep(0.01)
        return card_id
    if state is CardState.REJECTED:
        assert (await ledger.reject(card_id, admin="root@acme.example", reason="no")).ok
        return card_id
    if state is CardState.CANCELLED:
        assert (await ledger.cancel(card_id, actor=subject)).ok
        return card_id
    approved = await ledger.approve(card_id, approver="root@acme.example", version=card.version,
                                    args_hash=card.args_hash, comment="")  # fmt: skip
    assert approved.ok, approved.status
    if state is CardState.APPROVED:
        return card_id
    claimed = await ledger.claim(card_id, worker="w1", lease_ms=60_000)
    assert claimed.card is not None
    if state is CardState.EXECUTING:
        return card_id
    fence = claimed.card.fence
    assert (await ledger.dispatch(card_id, fence=fence)).ok
    outcome = CardState.UNKNOWN if state is CardState.NEEDS_RECONCILIATION else state
    done = await ledger.complete(card_id, fence=fence, outcome=outcome, reference=f"bk-{n}", evidence={"n": n},
                                 settle_ms=60_000)  # fmt: skip
    assert done.ok, done.status
    if state is CardState.NEEDS_RECONCILIATION:
        assert (await ledger.reconcile(card_id, result="NEEDS_RECONCILIATION", reference="", evidence={})).ok
    return card_id


def _audit(redis: Redis) -> RedisStreamAuditSink:
    return RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode())


def _retention(redis: Redis, directory: Path, keep_ms: int = KEEP_MS) -> RedisCardRetention:
    return RedisCardRetention(redis, CardArchive(directory), keep_ms=keep_ms, audit=_audit(redis),
                              batch=3)  # fmt: skip  # small batches: the paging is exercised too


async def _stored(redis: Redis, card_id: str) -> bytes | None:
    shard = card_shard(card_id)
    assert shard is not None
    raw: Any = await redis.get(card_keys(card_id, shard)[0])
    return raw


async def _indexed(redis: Redis, card_id: str, requester: tuple[str, str]) -> tuple[bool, bool]:
    shard = card_shard(card_id)
    assert shard is not None
    org = await redis.zscore(org_index(shard, requester[0]), card_id)
    mine = await redis.zscore(requester_index(shard, *requester), card_id)
    return org is not None, mine is not None


async def _wait_out_retention() -> None:
    await anyio.sleep(KEEP_MS / 1000 + 0.1)


ALL_STATES = sorted(CardState)


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    old=st.lists(st.tuples(st.sampled_from(ALL_STATES), st.sampled_from(range(len(REQUESTERS)))), max_size=7),
    fresh=st.lists(st.sampled_from(sorted(TERMINAL)), max_size=2),
)
async def test_exactly_the_finished_cards_past_retention_leave_redis_and_each_is_archived_whole(
    quiet_redis_url: str, tmp_path_factory: pytest.TempPathFactory, old: list[tuple[CardState, int]],
    fresh: list[CardState],
) -> None:  # fmt: skip
    """Whatever the mix of states, requesters and ages: a card leaves Redis exactly when it is finished and its
    last event is older than the retention; each that leaves is in the archive as it last was, history and
    chain included, and out of its org's and its requester's indexes; every other card is untouched."""
    redis = Redis.from_url(quiet_redis_url)
    directory = tmp_path_factory.mktemp("cards")
    try:
        await redis.flushdb()
        ledger = RedisLedger(redis)
        cards = [(await _to(ledger, state, n, REQUESTERS[who]), state, REQUESTERS[who])
                 for n, (state, who) in enumerate(old)]  # fmt: skip
        await _wait_out_retention()
        cards += [(await _to(ledger, state, 100 + n), state, REQUESTERS[0]) for n, state in enumerate(fresh)]
        before = {card_id: (await _stored(redis, card_id), await ledger.events(card_id)) for card_id, _, _ in cards}

        retired = await _retention(redis, directory).sweep()

        due = {card_id for card_id, state, _ in cards[: len(old)] if state in TERMINAL}
        assert retired == len(due)
        archive = CardArchive(directory)
        for card_id, state, requester in cards:
            if card_id in due:
                assert await _stored(redis, card_id) is None
                assert await _indexed(redis, card_id, requester) == (False, False)
                copy = archive.find(card_id)
                assert copy is not None and copy["state"] == state.value
                events = [event_from_fields(event) for event in copy["events"]]
                assert events == before[card_id][1] and verify_chain(events)
            else:
                assert await _stored(redis, card_id) == before[card_id][0]
                assert await _indexed(redis, card_id, requester) == (True, True)
                assert archive.find(card_id) is None
    finally:
        await redis.aclose()


async def test_a_card_changed_after_it_was_archived_stays_and_is_archived_again_next_time(
    redis: Redis, tmp_path: Path
) -> None:
    """The removal is bound to the version archived: a late event between the two keeps the card in Redis."""
    ledger = RedisLedger(redis)
    card_id = await _to(ledger, CardState.SUCCEEDED, 1)
    await _wait_out_retention()
    loop = asyncio.get_running_loop()

    class LateResultArchive(CardArchive):
        """Writes as the archive does; then, before the removal, a late worker result reaches the card."""

        late = True

        def write(self, records: Sequence[Mapping[str, Any]], token: str) -> Path:
            written = super().write(records, token)
            if self.late:
                asyncio.run_coroutine_threadsafe(_late_result(ledger, card_id), loop).result(timeout=5)
                self.late = False
            return written

    archive = LateResultArchive(tmp_path)
    retention = RedisCardRetention(redis, archive, keep_ms=KEEP_MS, audit=_audit(redis))
    assert await retention.sweep() == 0
    kept = await ledger.get(card_id)
    assert kept is not None and kept.state is CardState.SUCCEEDED
    await _wait_out_retention()
    assert await retention.sweep() == 1
    copy = archive.find(card_id)
    assert copy is not None and int(copy["version"]) == kept.version  # the newest of the two copies


async def _late_result(ledger: RedisLedger, card_id: str) -> None:
    """A worker whose lease was taken over reports after the card finished: recorded, not applied."""
    late = await ledger.complete(card_id, fence=99, outcome=CardState.FAILED, reference="", evidence={},
                                 settle_ms=1000)  # fmt: skip
    assert late.status == "ERR_FENCE"


async def test_a_succeeded_card_stays_while_its_repeat_window_answers_and_leaves_after(
    redis: Redis, tmp_path: Path
) -> None:
    """The dedupe entry of a SUCCEEDED card answers identical proposals for its window: the card stays with it.
    Once the window has lapsed, card and entry leave together, and an identical proposal files a new card."""
    ledger = RedisLedger(redis, repeat_window_ms=1500)
    card_id = await _to(ledger, CardState.SUCCEEDED, 1)
    await _wait_out_retention()
    retention = _retention(redis, tmp_path)
    assert await retention.sweep() == 0
    assert CardArchive(tmp_path).find(card_id) is None  # not archived either: no copy per sweep while it waits
    repeat = await ledger.propose(replace(PROPOSAL, dedupe_key="retention|1"))
    assert repeat.status == "EXISTING" and repeat.card is not None and repeat.card.card_id == card_id
    await anyio.sleep(1.6)
    assert await retention.sweep() == 1
    shard = card_shard(card_id)
    assert shard is not None
    for bucket in open_buckets(shard):
        assert all(card_id.encode() not in value for value in (await redis.hvals(bucket)))
    again = await ledger.propose(replace(PROPOSAL, dedupe_key="retention|1"))
    assert again.status == "OK" and again.card is not None and again.card.card_id != card_id


async def test_nothing_leaves_redis_when_the_archive_cannot_be_written(redis: Redis, tmp_path: Path) -> None:
    """Archive first, remove after: an archive directory that cannot be made keeps every card where it was."""
    ledger = RedisLedger(redis)
    card_id = await _to(ledger, CardState.REJECTED, 1)
    await _wait_out_retention()
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the archive should be")
    with pytest.raises(CardArchiveError) as raised:
        await _retention(redis, blocked / "cards").sweep()
    assert raised.value.path == blocked / "cards"  # the disk failed there, not Redis
    assert isinstance(raised.value.__cause__, NotADirectoryError)
    assert await _stored(redis, card_id) is not None
    assert await redis.get(LOCK_KEY) is None  # released, so the next sweep is not held up


async def test_retention_zero_keeps_every_card_and_a_held_lock_defers_the_sweep(redis: Redis, tmp_path: Path) -> None:
    ledger = RedisLedger(redis)
    card_id = await _to(ledger, CardState.CANCELLED, 1)
    await _wait_out_retention()
    assert await _retention(redis, tmp_path, keep_ms=0).sweep() == 0
    await redis.set(LOCK_KEY, "another-sweeper", px=10_000)
    assert await _retention(redis, tmp_path).sweep() == 0
    assert await redis.get(LOCK_KEY) == b"another-sweeper"  # not ours to release
    await redis.delete(LOCK_KEY)
    assert await _retention(redis, tmp_path).sweep() == 1
    assert await _stored(redis, card_id) is None


async def test_every_retired_card_is_audited_with_its_archive_file(redis: Redis, tmp_path: Path) -> None:
    ledger = RedisLedger(redis)
    ids = {await _to(ledger, state, n) for n, state in enumerate((CardState.FAILED, CardState.EXPIRED))}
    await _wait_out_retention()
    assert await _retention(redis, tmp_path).sweep() == 2
    events = [e for e in await _audit(redis).recent(50) if e.action == "card.archive"]
    assert {e.extra["card_id"] for e in events} == ids
    files = {path.name for path in CardArchive(tmp_path).files()}
    assert all(e.extra["archive"] in files and e.org == "acme" for e in events)
    for event in events:  # the keyed trail binds each archived copy: its version and its chain head
        copy = CardArchive(tmp_path).find(event.extra["card_id"])
        assert copy is not None and (event.extra["version"], event.extra["chain"]) == (copy["version"], copy["chain"])
        assert copy["chain"] == copy["events"][-1]["hash"]


async def test_archive_lines_that_do_not_read_are_skipped_and_the_highest_version_wins(tmp_path: Path) -> None:
    archive = CardArchive(tmp_path)
    card = {"card_id": "crd_1_" + "a" * 32, "version": "3", "state": "SUCCEEDED"}
    archive.write([{"card_id": card["card_id"], "version": 3, "card": card}], "one")
    archive.write([{"card_id": card["card_id"], "version": 5, "card": {**card, "version": "5"}}], "two")
    broken = ["not json", json.dumps([1]), json.dumps({"card_id": card["card_id"], "version": "9", "card": card})]
    (tmp_path / "cards-20000101-000000-broken.jsonl").write_text("\n".join(broken) + "\n")
    found = archive.find(card["card_id"])
    assert found is not None and found["version"] == "5"
    assert archive.find("crd_1_" + "b" * 32) is None


async def test_the_removal_script_itself_refuses_open_changed_and_recent_cards(redis: Redis) -> None:
    """The script checks again what the sweep chose by, on the card as it is then: whatever a caller passes, an
    open card, a card at another version and one finished too recently stay whole in Redis."""
    ledger = RedisLedger(redis)
    script = redis.register_script(RETIRE)

    async def retire(card_id: str, version: int, keep_ms: int = KEEP_MS) -> str:
        card = await ledger.get(card_id)
        assert card is not None
        shard = card_shard(card_id)
        assert shard is not None
        keys = [*card_keys(card_id, shard), org_index(shard, card.requester_org),
                requester_index(shard, card.requester_org, card.requester_subject)]  # fmt: skip
        return (await script(keys=keys, args=["retire", version, keep_ms])).decode()

    open_ids = {state: await _to(ledger, state, n) for n, state in enumerate(sorted(set(CardState) - TERMINAL))}
    finished = await _to(ledger, CardState.SUCCEEDED, 50)
    repeating = await _to(RedisLedger(redis, repeat_window_ms=60_000), CardState.SUCCEEDED, 51)
    repeating_version = (await ledger.get(repeating)).version  # type: ignore[union-attr]
    assert await retire(finished, 1, keep_ms=60_000) == "CHANGED"  # not the version it is at
    version = (await ledger.get(finished)).version  # type: ignore[union-attr]
    assert await retire(finished, version, keep_ms=60_000) == "RECENT"
    await _wait_out_retention()
    for state, card_id in open_ids.items():
        card = await ledger.get(card_id)
        assert card is not None and card.state is state
        assert await retire(card_id, card.version) == "OPEN", state
        assert await _stored(redis, card_id) is not None
    assert await retire(repeating, repeating_version) == "REPEATING"  # its window answers repeats
    assert await _stored(redis, repeating) is not None
    assert await retire(finished, version) == "RETIRED"
    assert await _stored(redis, finished) is None


async def test_a_sweeper_that_lost_its_lock_stops_at_the_next_batch(redis: Redis, tmp_path: Path) -> None:
    """Stalled past the lock's life, another sweeper took over: this one finishes its batch and stops."""
    ledger = RedisLedger(redis)
    ids = [await _to(ledger, CardState.REJECTED, n) for n in range(3)]
    await _wait_out_retention()
    loop = asyncio.get_running_loop()

    class LockTakenArchive(CardArchive):
        def write(self, records: Sequence[Mapping[str, Any]], token: str) -> Path:
            taken = redis.set(LOCK_KEY, "another-sweeper", px=10_000)
            asyncio.run_coroutine_threadsafe(taken, loop).result(timeout=5)  # type: ignore[arg-type]
            return super().write(records, token)

    retention = RedisCardRetention(redis, LockTakenArchive(tmp_path), keep_ms=KEEP_MS, audit=_audit(redis), batch=1)
    assert await retention.sweep() == 1
    assert sum([await _stored(redis, card_id) is not None for card_id in ids]) == 2
    assert await redis.get(LOCK_KEY) == b"another-sweeper"


async def test_a_sweep_stops_at_its_share_and_the_next_one_goes_on(redis: Redis, tmp_path: Path) -> None:
    """A backlog leaves a share per sweep (rounded up to whole batches), until none is left."""
    ledger = RedisLedger(redis)
    ids = [await _to(ledger, CardState.CANCELLED, n) for n in range(7)]
    await _wait_out_retention()
    retention = RedisCardRetention(redis, CardArchive(tmp_path), keep_ms=KEEP_MS, audit=_audit(redis), batch=2,
                                   per_sweep=3)  # fmt: skip
    assert [await retention.sweep() for _ in range(4)] == [4, 3, 0, 0]
    assert [await _stored(redis, card_id) for card_id in ids] == [None] * len(ids)
