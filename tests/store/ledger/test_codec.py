"""The stored form of a card (gateway/store/ledger/codec.py): cards written in the long
form or as compact JSON still read and run, the Python reader agrees with the scripts, and a card's own key
stays within its bytes."""

from __future__ import annotations

import json
import secrets
from dataclasses import replace

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.canonical import canonical_json
from gateway.cards.card import CardState, verify_chain
from gateway.limits.budgets import Limits
from gateway.store.ledger.codec import SHORT, WORDS, decode_card, stored_table
from gateway.store.ledger.layout import card_keys, count_tag, open_cards_key, org_index, orgs_key, requester_index
from gateway.store.ledger.redis_ledger import RedisLedger, card_shard
from tests.support.cards import PROPOSAL
from tests.support.examples import examples

pytestmark = pytest.mark.anyio


@pytest.fixture
def redis(quiet: Redis) -> Redis:
    """These tests move cards by hand, which a session worker on the shared database would claim: the
    database no worker drains (conftest's `quiet`)."""
    return quiet


OLD_ID = "crd_7_10c647526acf931f92d1447bcab8a0fc"
OLD_FIRST_HASH = "795306033bff08c2db6792c7488ac17c0c93cbf6"
# A PENDING card as the ledger stored it before the compact form (revision 6256f18), verbatim but for
# its decision deadline, which lies outside the hashed history.
OLD_CARD = (
    '{"transaction_id":"txn_788211a3c52c57ce656385f4","updated_ms":"1796134125350","approver_role":"approver",'
    '"args_hash":"b10d5c3c31958916a5281190cb87f1c09fc5e0256f81a99adcfa90d1f2d880e7",'
    '"idempotency_key":"cs-aad256fb62a08c8da046a83be00dad73",'
    '"tool_version":"2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",'
    '"agent_text":"{\\"title\\":\\"Bench booking\\"}","preview":"","requester_subject":"bench@acme.example",'
    '"execute_within_ms":"3600000","state":"PENDING","summary":"Book room-atlas on 2031-01-06 from 00:00 to 10:00",'
    '"requester_key_id":"key_0123456789ab","fence":"0","delegation":"{\\"acting_client\\": \\"\\", \\"actors\\": []}",'
    '"dedupe":"7a531464f8ab0e72482a36ed9d0a2e2b","decide_by_ms":"4102444800000","tool":"rooms_book","attempts":"0",'
    '"chain":"795306033bff08c2db6792c7488ac17c0c93cbf6","approvals_required":"1",'
    '"card_id":"crd_7_10c647526acf931f92d1447bcab8a0fc","applied":[["348c373f821f820cf5bfaaaa","created"]],'
    '"requester_roles":"staff","open_member":"e65590b7c3299e14:crd_7_10c647526acf931f92d1447bcab8a0fc",'
    '"dispatched":"0","arguments":"{\\"date\\":\\"2031-01-06\\",\\"end\\":\\"10:00\\",\\"n\\":0,'
    '\\"room_id\\":\\"room-atlas\\",\\"start\\":\\"00:00\\",\\"title\\":\\"Bench booking\\"}",'
    '"events":[{"hash":"795306033bff08c2db6792c7488ac17c0c93cbf6","actor":"bench@acme.example",'
    '"data":"{\\"tool\\":\\"rooms_book\\",\\"args_hash\\":'
    '\\"b10d5c3c31958916a5281190cb87f1c09fc5e0256f81a99adcfa90d1f2d880e7\\"}","at":"1796134125350",'
    '"version":"1","prev":"","state":"PENDING","seq":"1","type":"created"}],"approvers":"[]",'
    '"created_ms":"1796134125350","version":"1","seq":"1","requester_org":"acme"}'
)

COMPACT_ID = "crd_7_a6d714700c1081881b0440a89898ad2f"
COMPACT_FIRST_HASH = "5d9b2759d8c5d78d5f22cc62d57f9c1d8880c3d1"
# A PENDING card as the ledger stored it before the packing (compact JSON, revision 5f417bc), verbatim but for
# its decision deadline (``d``, relative to ``c``), which lies outside the hashed history.
COMPACT_CARD = (
    '{"a":"{\\"date\\":\\"2031-01-06\\",\\"end\\":\\"10:00\\",\\"room_id\\":\\"room-atlas\\",\\"start\\":\\"09:00\\",'
    '\\"title\\":\\"Bench booking\\"}","c":"1796145183987","d":"2306299616013",'
    '"ev":[["5d9b2759d8c5d78d5f22cc62d57f9c1d8880c3d1","1","0","c","P"]],'
    '"h":"b10d5c3c31958916a5281190cb87f1c09fc5e0256f81a99adcfa90d1f2d880e7","rw":"0",'
    '"dd":"f40a4ac54226d5818141e0a0be36b0e5","rr":"staff","rs":"bench@acme.example","xw":"3600000",'
    '"s":"Book room-atlas on 2031-01-06 from 09:00 to 10:00","rk":"key_0123456789ab","st":"P","v":"1",'
    '"tx":"txn_28186a931c406fe39ed7b242","x":"{\\"title\\":\\"Bench booking\\"}","ro":"acme",'
    '"y":[["544c659211e52fae","c"]],"oc":"1","t":"rooms_book",'
    '"tv":"2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881","k":"cs-f115a2fae535a09cd8d32a31d46521cc"}'
)

BENCH_ARGUMENTS = {"date": "2031-01-06", "end": "10:00", "room_id": "room-atlas", "start": "09:00",
                   "title": "Bench booking"}  # fmt: skip
BENCH_PROPOSAL = replace(
    PROPOSAL,
    tool_version="2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
    arguments=BENCH_ARGUMENTS,
    args_hash="b10d5c3c31958916a5281190cb87f1c09fc5e0256f81a99adcfa90d1f2d880e7",
    requester_subject="bench@acme.example",
    requester_key_id="key_0123456789ab",
    summary="Book room-atlas on 2031-01-06 from 09:00 to 10:00",
    agent_text={"title": "Bench booking"},
    decide_within_ms=86_400_000,
    execute_within_ms=3_600_000,
)
"""A card the size of the write bench's (bench/write_path.py): hashes and ids at their real lengths."""
PENDING_BYTES = 800
SUCCEEDED_BYTES = 1_300
"""Most bytes (MEMORY USAGE) a card's own key may take beyond its canonical arguments, by state."""


def _key(card_id: str) -> str:
    shard = card_shard(card_id)
    assert shard is not None
    return RedisLedger._keys(card_id, shard)[0]


async def _run_to_success(ledger: RedisLedger, card_id: str) -> None:
    card = await ledger.get(card_id)
    assert card is not None
    approved = await ledger.approve(card_id, approver="admin@acme.example", version=card.version,
                                    args_hash=card.args_hash, comment="")  # fmt: skip
    assert approved.status == "OK"
    claimed = await ledger.claim(card_id, worker="worker-1a2b3c", lease_ms=30_000)
    assert claimed.card is not None
    assert (await ledger.dispatch(card_id, fence=claimed.card.fence)).status == "OK"
    done = await ledger.complete(card_id, fence=claimed.card.fence, outcome=CardState.SUCCEEDED,
                                 reference="bk_0123456789abcdef", evidence={"status": 201},
                                 settle_ms=1_000)  # fmt: skip
    assert done.status == "OK" and done.card == await ledger.get(card_id)


async def test_a_card_stored_in_the_long_form_reads_runs_to_its_outcome_and_keeps_its_chain(redis: Redis) -> None:
    """A card written before the compact form reads as it was stored, is listed and counted against its
    requester's cap where it was then, approves, runs and succeeds; from its first transition on it is
    stored compactly, its history still verifies from the same first hash, and it no longer counts."""
    ledger = RedisLedger(redis)
    await redis.set(_key(OLD_ID), OLD_CARD)
    # Where the ledger had it then: the shard index of everyone's cards and the open-card set.
    await redis.zadd(RedisLedger._keys(OLD_ID, 7)[3], {OLD_ID: 1796134125350})
    await redis.zadd(open_cards_key(7), {f"e65590b7c3299e14:{OLD_ID}": 0})
    assert [c.card_id for c in await ledger.recent()] == [OLD_ID]
    assert await ledger.open_cards("acme", "bench@acme.example") == 1
    card = await ledger.get(OLD_ID)
    assert card is not None and card.state is CardState.PENDING and card.requester_subject == "bench@acme.example"
    assert card.arguments["room_id"] == "room-atlas" and card.agent_text == {"title": "Bench booking"}
    assert card.idempotency_key == "cs-aad256fb62a08c8da046a83be00dad73" and card.approver_role == "approver"
    assert verify_chain(await ledger.events(OLD_ID))
    await _run_to_success(ledger, OLD_ID)
    raw = await redis.get(_key(OLD_ID))
    stored = stored_table(raw)
    assert raw[:1] != b"{" and "v" in stored and "card_id" not in stored and "events" not in stored
    events = await ledger.events(OLD_ID)
    assert verify_chain(events) and events[0].hash == OLD_FIRST_HASH
    assert [e.type for e in events] == ["created", "approved", "claimed", "dispatched", "completed"]
    done = await ledger.get(OLD_ID)
    assert done is not None and done.state is CardState.SUCCEEDED and done.idempotency_key == card.idempotency_key
    assert await ledger.open_cards("acme", "bench@acme.example") == 0 and await redis.zcard(open_cards_key(7)) == 0
    new = await ledger.propose(replace(BENCH_PROPOSAL, dedupe_key="new"))
    assert new.card is not None and await ledger.open_cards("acme", "bench@acme.example") == 1
    assert {c.card_id for c in await ledger.recent()} == {OLD_ID, new.card.card_id}


async def test_a_card_stored_as_compact_json_reads_is_found_runs_to_its_outcome_and_is_packed(redis: Redis) -> None:
    """A card written as compact JSON, before the packing, with its dedupe entry in the shard's one hash, reads
    as it was stored, is listed, answers an identical proposal and counts against its requester's cap; it
    approves, runs and succeeds, is then stored packed (no JSON), its history still verifies from
    the same first hash, and it no longer counts."""
    ledger = RedisLedger(redis)
    org, subject = "acme", "bench@acme.example"
    keys = card_keys(COMPACT_ID, 7)
    await redis.set(keys[0], COMPACT_CARD)
    await redis.hset(keys[2], "f40a4ac54226d5818141e0a0be36b0e5", f"{COMPACT_ID}|4102444800000")
    await redis.zadd(keys[4], {COMPACT_ID: 4102444800000})
    await redis.hset(keys[7], count_tag(org, subject), 1)
    for index in (org_index(7, org), requester_index(7, org, subject)):
        await redis.zadd(index, {COMPACT_ID: 1796145183987})
    await redis.sadd(orgs_key(7), org_index(7, org).rsplit(":", 1)[1])
    assert [c.card_id for c in await ledger.recent()] == [COMPACT_ID]
    assert await ledger.open_cards(org, subject) == 1
    card = await ledger.get(COMPACT_ID)
    assert card is not None and card.state is CardState.PENDING and card.args_hash == BENCH_PROPOSAL.args_hash
    assert card.idempotency_key == "cs-f115a2fae535a09cd8d32a31d46521cc" and card.arguments == BENCH_ARGUMENTS
    assert card.transaction_id == "txn_28186a931c406fe39ed7b242" and card.requester_key_id == "key_0123456789ab"
    again = await ledger.propose(replace(BENCH_PROPOSAL, dedupe_key="compact-json"))
    assert again.status == "EXISTING" and again.card == card
    assert verify_chain(await ledger.events(COMPACT_ID))
    await _run_to_success(ledger, COMPACT_ID)
    raw = await redis.get(keys[0])
    assert raw[:1] != b"{" and b'\\"' not in raw
    events = await ledger.events(COMPACT_ID)
    assert verify_chain(events) and events[0].hash == COMPACT_FIRST_HASH
    done = await ledger.get(COMPACT_ID)
    assert done is not None and done.state is CardState.SUCCEEDED and done.idempotency_key == card.idempotency_key
    assert await ledger.open_cards(org, subject) == 0


async def test_a_field_the_codec_does_not_know_is_kept_under_its_own_name(redis: Redis) -> None:
    """A field a newer version adds (no short code yet) survives every transition and reads back as stored."""
    ledger = RedisLedger(redis)
    created = await ledger.propose(BENCH_PROPOSAL)
    assert created.card is not None
    card_id = created.card.card_id
    stored = stored_table(await redis.get(_key(card_id)))
    await redis.set(_key(card_id), json.dumps(stored | {"receipt_audience": "rooms-v2"}))
    await _run_to_success(ledger, card_id)
    assert decode_card(await redis.get(_key(card_id)), card_id)["receipt_audience"] == "rooms-v2"


async def test_a_cards_own_key_stays_within_its_bytes_pending_and_succeeded(redis: Redis) -> None:
    """MEMORY USAGE of the card's key, beyond its canonical arguments: at most PENDING_BYTES while pending and
    SUCCEEDED_BYTES once it succeeded (the shard's index, timer and dedupe entries are measured by
    bench/card_bytes.py: their cost per card depends on how many cards a shard holds)."""
    ledger = RedisLedger(redis)
    created = await ledger.propose(BENCH_PROPOSAL)
    assert created.card is not None
    card_id, arguments = created.card.card_id, len(canonical_json(BENCH_ARGUMENTS).encode())
    assert int(await redis.memory_usage(_key(card_id), samples=0)) - arguments <= PENDING_BYTES
    await _run_to_success(ledger, card_id)
    assert int(await redis.memory_usage(_key(card_id), samples=0)) - arguments <= SUCCEEDED_BYTES


async def _agree(redis_url: str, proposal_changes: dict[str, object]) -> None:
    client = Redis.from_url(redis_url)
    try:
        ledger = RedisLedger(client, limits=Limits(open_cards_per_requester=1_000_000))
        dedupe = secrets.token_hex(8)  # a new card each time, whatever the values
        created = await ledger.propose(replace(PROPOSAL, dedupe_key=dedupe, **proposal_changes))  # type: ignore[arg-type]
        assert created.card is not None
        card_id = created.card.card_id
        assert await ledger.get(card_id) == created.card  # the Python reader = what the script answered
        approved = await ledger.approve(card_id, approver="bob@acme.example", version=1,
                                        args_hash=created.card.args_hash, comment="ok")  # fmt: skip
        assert approved.card is not None and await ledger.get(card_id) == approved.card
        assert verify_chain(await ledger.events(card_id))
        for name, value in proposal_changes.items():
            assert getattr(approved.card, name) == value
    finally:
        await client.aclose()


text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)


digits = st.sampled_from(["0", "007", "-1", "-0", "12345678901234", "123456789012345", "1e5", "1.5", " 1"])
"""Values an integer packing must give back exactly, or leave alone."""
hexes = st.sampled_from(
    ["", "ab", "abc", "ABCD", "0g", "00ff", "b10d5c3c31958916a5281190cb87f1c09fc5e0256f81a99adcfa90d1f2"]
)
"""Values a raw packing of hex must give back exactly, or leave alone."""


@settings(max_examples=examples(30), deadline=None)
@given(
    summary=text | digits,
    args_hash=hexes.filter(bool) | digits,
    key_id=hexes.map(lambda h: f"key_{h}"),
    subject=text.filter(bool),
    roles=st.frozensets(st.sampled_from(["staff", "ops", "finance"])),
    approver_role=st.sampled_from(["approver", "finance-approver"]),
    agent=st.dictionaries(st.sampled_from(["title", "note"]), text, max_size=2),
    acting=st.sampled_from(["", "client-1"]),
    actors=st.lists(text.filter(bool), max_size=2).map(tuple),
    tool=st.sampled_from(["rooms_book", "orders.refund_create"]),
)
def test_the_python_reader_agrees_with_the_scripts_for_any_values(
    quiet_redis_url: str, summary: str, args_hash: str, key_id: str, subject: str, roles: frozenset[str],
    approver_role: str, agent: dict[str, str], acting: str, actors: tuple[str, ...], tool: str,
) -> None:  # fmt: skip
    """Whatever the text, defaults or not, hex or digits or neither: a card read from Redis equals the card the
    scripts answered, after its proposal and after an approval, and its history verifies."""
    changes: dict[str, object] = {"summary": summary, "args_hash": args_hash, "requester_key_id": key_id,
                                  "requester_subject": subject, "requester_roles": roles,
                                  "approver_role": approver_role, "agent_text": agent, "acting_client": acting,
                                  "actors": actors, "tool": tool}  # fmt: skip
    anyio.run(_agree, quiet_redis_url, changes)


async def test_events_keep_their_own_worker_when_a_later_lease_goes_to_another(redis: Redis) -> None:
    """An event's actor may be stored as "the lease owner": after a release and a claim by a second worker,
    the first worker's events still name the first worker, and the chain still verifies."""
    ledger = RedisLedger(redis)
    created = await ledger.propose(BENCH_PROPOSAL)
    assert created.card is not None
    card_id = created.card.card_id
    assert (await ledger.approve(card_id, approver="admin@acme.example", version=1, args_hash=created.card.args_hash,
                                 comment="")).status == "OK"  # fmt: skip
    first = await ledger.claim(card_id, worker="worker-one", lease_ms=30_000)
    assert first.card is not None
    assert (await ledger.release(card_id, fence=first.card.fence, reason="busy", requeue_ms=1_000)).status == "OK"
    second = await ledger.claim(card_id, worker="worker-two", lease_ms=30_000)
    assert second.card is not None
    events = await ledger.events(card_id)
    assert [(e.type, e.actor) for e in events[2:]] == [
        ("claimed", "worker-one"), ("released", "worker-one"), ("claimed", "worker-two")]  # fmt: skip
    assert verify_chain(events)
    stored = stored_table(await redis.get(_key(card_id)))
    assert [row[6] for row in stored["ev"][2:]] == ["worker-one", "worker-one", 1]  # only the holder's own is coded


def test_codes_are_unique_and_shorter_than_any_name_or_word_so_an_uncoded_one_reads_as_itself() -> None:
    """A field or word without a code is stored as it is: no code may equal a name, a word or another code."""
    for table in (SHORT, WORDS):
        assert len(set(table.values())) == len(table)
        assert max(len(code) for code in table.values()) < min(len(name) for name in table)
    assert {state.value for state in CardState} <= set(WORDS)
