"""The ledger: approval cards in Redis, every transition one atomic Lua script.

Who calls it: the executor (`propose`), the card service behind the admin API and CLI (`approve`,
`reject`, `cancel`, `resolve`, reads), and the worker (`claim`, `dispatch`, `complete`, `release`,
`recover`, `reconcile`, the outbox and the timers).

Layout: cards are spread over `SHARDS` hash tags ``{csN}``. A card (one compact MessagePack string
holding its events and applied transition ids, `gateway.store.ledger.codec`) shares the tag of its shard
with the shard's outbox stream, dedupe buckets (`open_bucket`), timers, open-card counts and the indexes of its
org and its requester, so every script touches exactly one slot (Redis Cluster safe). The shard of
a card is chosen from its requester (org and subject): all of one requester's cards live in one
shard, so `propose` counts the requester's open cards against its cap
(`gateway.limits.budgets.Limits.open_cards`) in the same atomic script, and an identical proposal, whose
dedupe key is scoped to its requester, lands where the open card it duplicates lives. The same
dedupe entry outlives a SUCCEEDED card by its repeat window (`repeat_window_ms`), so a repeat of a
finished write is answered with it; and a policy's approval counts against its requester's daily
budget in the same shard (`approve_by_policy`).

Every script reads Redis ``TIME``, checks all its guards before its first write, bumps the card's
version, and records a hash-chained event in the card's history, which stays bounded (repeats
counted, long histories compacted: `gateway.store.ledger.scripts`). A retried call with the same
transition id returns ``ALREADY_APPLIED`` and changes nothing: redis-py retries commands on
connection errors, so a script may well run twice.

Every script runs through `RedisLedger._eval`, in one pipeline (one round trip) with what confirms it
durable (`gateway.store.durability`: a barrier write and ``WAITAOF`` where the server has it, then
``CONFIG GET appendonly maxmemory-policy``). An answer that could not be confirmed becomes
``ERR_NOT_DURABLE`` with the script's own answer in `Transition.applied` (see `gateway.cards.contract`).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis

from gateway.canonical import canonical_json
from gateway.cards.card import Card, CardEvent, CardState
from gateway.cards.contract import CardPage, CardQuery, OutboxEntry, Proposal, Transition, TransitionStatus
from gateway.config.approvals import POLICY_PREFIX
from gateway.limits.budgets import Limits
from gateway.store.client import DEFAULT_TIMEOUT_SECONDS, store_boundary
from gateway.store.durability import DurabilityReport, eval_confirmed, has_waitaof
from gateway.store.ledger.changes import RedisCardChanges
from gateway.store.ledger.codec import card_from_fields as _card
from gateway.store.ledger.codec import decode_card, stored_delegation
from gateway.store.ledger.codec import event_from_fields as _event
from gateway.store.ledger.layout import (
    SHARDS,
    card_keys,
    card_shard,
    count_tag,
    everyones_indexes,
    open_bucket,
    open_cards_key,
    open_count_key,
    org_index,
    orgs_key,
    policy_budget_key,
    requester_index,
    requester_shard,
    requester_tag,
)
from gateway.store.ledger.layout import tag as _tag
from gateway.store.ledger.outbox import OUTBOX_GROUP, ensure_outbox_group, outbox_keys, read_outbox
from gateway.store.ledger.pages import SCAN_LIMIT, read_page
from gateway.store.ledger.scripts import PRELUDE, SCRIPTS
from gateway.store.ledger.telemetry import observed

__all__ = ["SHARDS", "RedisLedger", "card_shard"]


@store_boundary
class RedisLedger:
    """The `Ledger` in Redis: one Lua script per transition, cards spread over `SHARDS` hash tags."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        scan_limit: int = SCAN_LIMIT,
        blocking: aioredis.Redis | None = None,
        blocking_slack: float = DEFAULT_TIMEOUT_SECONDS,
        limits: Limits | None = None,
        fsync_timeout_ms: int = int(DEFAULT_TIMEOUT_SECONDS * 500),
        on_verdict: Callable[[DurabilityReport], None] | None = None,
        min_replicas: int = 0,
        repeat_window_ms: int = 0,
    ) -> None:
        """`fsync_timeout_ms` bounds each ``WAITAOF`` (or ``WAIT``) and must stay below `client`'s read
        timeout (half of it by default); `on_verdict` hears every transition's durability verdict
        (`LedgerGuard.observe`); `min_replicas` is how many replicas must confirm each transition;
        `repeat_window_ms` is how long a SUCCEEDED card answers identical proposals (0: not at all)."""
        self._repeat_window_ms = repeat_window_ms
        self._client = client
        self._limits = limits if limits is not None else Limits()  # the open-card cap per requester
        # Outbox reads block longer than `client`'s read timeout allows (`gateway.store.client.connect`).
        self._blocking = blocking if blocking is not None else client
        self._blocking_slack = blocking_slack
        self.changes = RedisCardChanges(self._blocking)  # every saved card, as announced by its script
        self._scan_limit = scan_limit  # most cards one `page` examines (gateway.store.ledger.pages)
        self._scripts = {name: client.register_script(PRELUDE + body) for name, body in SCRIPTS.items()}
        self._waitaof: bool | None = None  # learnt once, on first use: does the server have WAITAOF?
        self._fsync_timeout_ms = fsync_timeout_ms
        self._on_verdict = on_verdict
        self._min_replicas = min_replicas

    # -- keys -------------------------------------------------------------------------------------

    @staticmethod
    def _keys(card_id: str, shard: int) -> list[str]:
        """The keys every script gets, in the order the KEYS comment of `PRELUDE` gives them."""
        return card_keys(card_id, shard)

    @classmethod
    def _proposal_keys(cls, card_id: str, shard: int, org: str, subject: str) -> list[str]:
        """The keys of `propose`: every script's, then the shard's index of the org and of the requester,
        and the shard's set of org tags."""
        return [
            *cls._keys(card_id, shard),
            org_index(shard, org),
            requester_index(shard, org, subject),
            orgs_key(shard),
        ]

    async def open_cards(self, org: str, subject: str) -> int:
        """How many of the requester's cards count against its open-card cap now."""
        shard, requester = requester_shard(org, subject), requester_tag(org, subject)
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.hget(open_count_key(shard), count_tag(org, subject))
            pipe.zlexcount(open_cards_key(shard), f"[{requester}:", f"({requester};")  # cards stored before the counts
            counted, older = await pipe.execute()
        return int(counted or 0) + int(older)

    @observed  # a span, a count and the card's latencies per transition (gateway.store.ledger.telemetry)
    async def _eval(self, name: str, keys: list[str], args: list[str | int]) -> Transition:
        """Run one script and confirm it durable, in one round trip; every script call goes through here."""
        if self._waitaof is None:
            self._waitaof = await has_waitaof(self._client)
        answer, report = await eval_confirmed(
            self._client,
            self._scripts[name],
            keys,
            args,
            waitaof=self._waitaof,
            barrier_key=keys[0].partition(":card:")[0] + ":fsync",  # in the card's slot (Redis Cluster)
            fsync_timeout_ms=self._fsync_timeout_ms,
            min_replicas=self._min_replicas,
        )
        if self._on_verdict is not None:
            self._on_verdict(report)
        result = _transition(answer)
        if report.durable:
            return result
        return Transition(
            status=TransitionStatus.ERR_NOT_DURABLE,
            card=result.card,
            extra=result.extra,
            applied=result.status,
            problems=report.problems,
        )

    async def _run(self, name: str, card_id: str, *args: str | int) -> Transition:
        return await self._replay(name, card_id, _transition_id(), *args)

    async def _replay(self, name: str, card_id: str, transition_id: str, *args: str | int) -> Transition:
        """Run a script under `transition_id` (`_run` mints a fresh one; tests of replay safety choose theirs)."""
        shard = card_shard(card_id)
        if shard is None:
            return Transition(status=TransitionStatus.ERR_NOT_FOUND, card=None, extra={})
        return await self._eval(name, self._keys(card_id, shard), [transition_id, *args])

    # -- creating and deciding --------------------------------------------------------------------

    async def propose(self, proposal: Proposal) -> Transition:
        """Create a PENDING card, or return the open card with the same dedupe key (``EXISTING``), or
        refuse with ``ERR_QUOTA_EXCEEDED`` (``extra``: ``limit``, ``open``) at the requester's open-card cap."""
        org, subject = proposal.requester_org, proposal.requester_subject
        requester, shard = requester_tag(org, subject), requester_shard(org, subject)
        dedupe = _stored_dedupe(requester, proposal.dedupe_key)
        card_id = f"crd_{shard}_{secrets.token_hex(16)}"
        fields: dict[str, str] = {
            "card_id": card_id,
            "tool": proposal.tool,
            "tool_version": proposal.tool_version,
            "arguments": canonical_json(proposal.arguments),
            "args_hash": proposal.args_hash,
            "requester_subject": proposal.requester_subject,
            "requester_org": proposal.requester_org,
            "requester_key_id": proposal.requester_key_id,
            "requester_roles": ",".join(sorted(proposal.requester_roles)),
            "approvals_required": str(proposal.approvals_required),
            "approver_role": proposal.approver_role,
            "summary": proposal.summary,
            "agent_text": canonical_json(proposal.agent_text),
            "execute_within_ms": str(proposal.execute_within_ms),
            # Minted once, here, and stored before anything is sent; never regenerated.
            "idempotency_key": f"cs-{secrets.token_hex(16)}",
            "transaction_id": f"txn_{secrets.token_hex(12)}",
            "preview": canonical_json(proposal.preview.to_json()) if proposal.preview is not None else "",
            "repeat_within_ms": str(self._repeat_window_ms),
            "provenance": proposal.provenance.to_stored() if proposal.provenance is not None else "",
        } | stored_delegation(proposal.acting_client, proposal.actors)
        cap = self._limits.open_cards(org)
        result = await self._eval(
            "propose",
            self._proposal_keys(card_id, shard, org, subject),
            [_transition_id(), _ARGUMENT.encode(fields), dedupe, proposal.decide_within_ms, cap, requester],
        )
        if result.status is TransitionStatus.EXISTING:
            existing = await self.get(str(result.extra["card_id"]))
            return Transition(status=TransitionStatus.EXISTING, card=existing, extra=result.extra)
        return result

    async def repeated(self, org: str, subject: str, dedupe_key: str) -> Card | None:
        """The SUCCEEDED card an identical proposal of (`org`, `subject`) would be answered with now, or None."""
        shard = requester_shard(org, subject)
        async with self._client.pipeline(transaction=False) as pipe:
            dedupe = _stored_dedupe(requester_tag(org, subject), dedupe_key)
            pipe.hget(open_bucket(shard, dedupe), dedupe)
            pipe.hget(f"{_tag(shard)}:open", dedupe)  # an entry written before the buckets
            pipe.time()
            bucketed, older, (seconds, micros) = await pipe.execute()
        entry = bucketed or older
        card_id, _, until = _text(entry).partition("|") if entry else ("", "", "0")
        if int(seconds) * 1000 + int(micros) // 1000 >= int(until):
            return None
        card = await self.get(card_id)
        return card if card is not None and card.state is CardState.SUCCEEDED else None

    async def approve(
        self,
        card_id: str,
        *,
        approver: str,
        version: int,
        args_hash: str,
        comment: str,
        requeue_ms: int = 10_000,
        identity: str = "",
    ) -> Transition:
        return await self._run("approve", card_id, approver, version, args_hash, comment, requeue_ms, 0, identity)

    async def approve_by_policy(
        self,
        card_id: str,
        *,
        rule: str,
        requester: tuple[str, str],
        version: int,
        args_hash: str,
        day: str,
        budget: int,
        requeue_ms: int = 10_000,
    ) -> Transition:
        """`approve` as ``policy:<rule>``, within `budget` approvals of `requester` (org, subject) on UTC `day`."""
        shard = card_shard(card_id)
        if shard is None:
            return Transition(status=TransitionStatus.ERR_NOT_FOUND, card=None, extra={})
        keys = [*self._keys(card_id, shard), policy_budget_key(*requester, day)]
        args: list[str | int] = [secrets.token_hex(12), f"{POLICY_PREFIX}{rule}", version, args_hash, "", requeue_ms]
        return await self._eval("approve", keys, [*args, budget])

    async def reject(
        self, card_id: str, *, admin: str, reason: str, version: int | None = None, args_hash: str | None = None
    ) -> Transition:
        """Veto a PENDING card; with `version` and `args_hash`, only the card exactly as reviewed (else ERR_STALE)."""
        bound = ("", "") if version is None else (version, args_hash or "")
        return await self._run("reject", card_id, admin, reason, *bound)

    async def cancel(self, card_id: str, *, actor: str) -> Transition:
        return await self._run("cancel", card_id, actor)

    async def resolve(self, card_id: str, *, admin: str, outcome: str, evidence: Mapping[str, Any]) -> Transition:
        return await self._run("resolve", card_id, admin, outcome, canonical_json(evidence))

    # -- executing --------------------------------------------------------------------------------

    async def claim(self, card_id: str, *, worker: str, lease_ms: int) -> Transition:
        return await self._run("claim", card_id, worker, lease_ms)

    async def claim_resend(self, card_id: str, *, worker: str, lease_ms: int, max_resends: int) -> Transition:
        return await self._run("claim_resend", card_id, worker, lease_ms, max_resends)

    async def dispatch(self, card_id: str, *, fence: int) -> Transition:
        """Record DISPATCHED, confirmed durable like every transition (`_eval`) before the caller sends.

        ``ERR_NOT_DURABLE``: DISPATCHED may be recorded but is not confirmed on disk, so nothing may
        be sent (the caller releases the card; it runs once the ledger is durable again).
        """
        return await self._run("dispatch", card_id, fence)

    async def complete(
        self,
        card_id: str,
        *,
        fence: int,
        outcome: CardState,
        reference: str,
        evidence: Mapping[str, Any],
        settle_ms: int,
    ) -> Transition:
        return await self._run(
            "complete", card_id, fence, outcome.value, reference, canonical_json(evidence), settle_ms
        )

    async def release(self, card_id: str, *, fence: int, reason: str, requeue_ms: int) -> Transition:
        return await self._run("release", card_id, fence, reason, requeue_ms)

    async def recover(self, card_id: str) -> Transition:
        return await self._run("recover", card_id)

    async def reconcile(
        self, card_id: str, *, result: str, reference: str, evidence: Mapping[str, Any], next_at_ms: int = 0
    ) -> Transition:
        return await self._run("reconcile", card_id, result, reference, canonical_json(evidence), next_at_ms)

    async def sweep_open(self, card_id: str, *, requeue_ms: int) -> Transition:
        return await self._run("sweep_open", card_id, requeue_ms, card_id)

    # -- reading ----------------------------------------------------------------------------------

    async def get(self, card_id: str) -> Card | None:
        shard = card_shard(card_id)
        if shard is None:
            return None
        raw: Any = await self._client.get(self._keys(card_id, shard)[0])
        return _card(decode_card(raw, card_id)) if raw else None

    async def events(self, card_id: str) -> list[CardEvent]:
        shard = card_shard(card_id)
        if shard is None:
            return []
        raw: Any = await self._client.get(self._keys(card_id, shard)[0])
        return [_event(entry) for entry in decode_card(raw, card_id).get("events", ())] if raw else []

    async def recent(
        self, *, limit: int = 200, org: str | None = None, requester: tuple[str, str] | None = None
    ) -> list[Card]:
        """The newest cards, newest first: of everyone, of one `org`, or of one `(org, subject)`."""
        scores: dict[str, float] = {}
        for shard in range(SHARDS):
            if requester is not None:
                indexes = [requester_index(shard, *requester)]
            elif org is not None:
                indexes = [org_index(shard, org)]
            else:  # every org's index, and the shard index that listed everyone's cards stored before
                indexes = everyones_indexes(shard, await self._client.smembers(orgs_key(shard)))
            for index in indexes:
                entries: Any = await self._client.zrevrange(index, 0, limit - 1, withscores=True)
                scores.update((_text(member), float(score)) for member, score in entries)
        ids = sorted(scores.items(), key=lambda item: item[1], reverse=True)
        cards = [await self.get(card_id) for card_id, _ in ids[:limit]]
        return [card for card in cards if card is not None]

    async def page(self, query: CardQuery, *, limit: int, cursor: str | None = None) -> CardPage:
        """At most `limit` cards matching `query`, newest first, after `cursor`: see `gateway.store.ledger.pages`.

        Raises:
            InvalidCursorError: `cursor` is not one this ledger issued.
        """
        if query.requester is not None:
            indexes = [requester_index(shard, query.org, query.requester) for shard in range(SHARDS)]
        else:
            indexes = [org_index(shard, query.org) for shard in range(SHARDS)]
        return await read_page(
            self._client, indexes, query, limit=limit, cursor=cursor, load=self._load, scan_limit=self._scan_limit
        )

    async def _load(self, card_ids: Sequence[str]) -> list[Card | None]:
        """The cards of `card_ids`, in order, in one round trip (None where there is none)."""
        async with self._client.pipeline(transaction=False) as pipe:
            for card_id in card_ids:  # ids come from the indexes, which hold only ids the ledger minted
                pipe.get(self._keys(card_id, card_shard(card_id) or 0)[0])
            raws: list[Any] = await pipe.execute()
        return [_card(decode_card(raw, card_id)) if raw else None for card_id, raw in zip(card_ids, raws, strict=True)]

    async def due(self, *, now_ms: int, limit: int = 100, from_ms: int = 0) -> list[str]:
        """Cards whose timer (expiry, requeue, lease, reconcile) is due by `now_ms`, not before `from_ms`:
        up to `limit` of each shard, the earliest first, shard after shard.

        Every shard is asked in one pipeline (on a Cluster, redis-py sends one per node): the sweeper asks
        four times a second, and one round trip per shard made an idle worker's largest cost."""
        async with self._client.pipeline(transaction=False) as pipe:
            for shard in range(SHARDS):
                pipe.zrangebyscore(f"{_tag(shard)}:timers", from_ms, now_ms, start=0, num=limit)
            answers: list[Any] = await pipe.execute()
        return [_text(member) for members in answers for member in members]

    async def server_time_ms(self) -> int:
        seconds, micros = await self._client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    # -- the outbox -------------------------------------------------------------------------------

    def outbox_keys(self) -> list[str]:
        return outbox_keys()

    def outbox_shards(self) -> range:
        return range(SHARDS)

    async def ensure_outbox_group(self) -> None:
        await ensure_outbox_group(self._client)

    async def read_outbox(
        self, consumer: str, *, block_ms: int, count: int = 16, shard: int | None = None
    ) -> list[OutboxEntry]:
        """See `gateway.store.ledger.outbox.read_outbox`."""
        return await read_outbox(
            self._client,
            self._blocking,
            consumer,
            block_ms=block_ms,
            count=count,
            shard=shard,
            slack=self._blocking_slack,
        )

    async def ack(self, entry: OutboxEntry) -> None:
        await self._client.xack(entry.stream, OUTBOX_GROUP, entry.entry_id)
        await self._client.xdel(entry.stream, entry.entry_id)


_ARGUMENT = json.JSONEncoder(separators=(",", ":"))  # a script's JSON argument, without json.dumps' spaces


def _stored_dedupe(requester: str, dedupe_key: str) -> str:
    """A dedupe key as stored: hashed (fixed and short: it sits in the shard's open-card hash), and scoped
    to its requester, so no proposal can ever be answered with another requester's card."""
    return hashlib.sha256(f"{requester}|{dedupe_key}".encode()).hexdigest()[:32]


def _transition_id() -> str:
    # 64 random bits: an id is only compared with the few dozen a card remembers (`MAX_APPLIED`).
    return secrets.token_hex(8)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _transition(raw: bytes | str) -> Transition:
    answer = json.loads(_text(raw))
    fields = answer.get("card") or {}
    extra = answer.get("extra") or {}
    return Transition(
        status=TransitionStatus(answer["status"]), card=_card(fields) if fields else None, extra=extra if extra else {}
    )
