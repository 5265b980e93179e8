"""The write-path load generator: ``python -m bench._write_load``, driven by JSON lines on stdin.

On `bench._engine`, as `bench._load` (the command loop, the cheap client, the closed loop and the
measured window), for the three things the write path does:

* ``{"cmd": "propose", "url", "token", "tool", "label", "concurrency", "warmup", "duration" | "calls",
  "server_pid", "service_pids", "return_cards"?}``: closed-loop ``tools/call`` proposals. Every call
  books a different one-minute slot (`booking`), so every call must file a new card: a success is HTTP
  200, a JSON-RPC result that is not ``isError``, and a receipt whose ``card_id`` is well formed, whose
  ``status`` is PENDING and which is not marked ``existing``. With ``calls`` instead of ``duration``
  it makes exactly that many calls (no warm-up) and can return the card ids. ``urls`` and
  ``server_pids`` spread the workers over several replicas, as in `bench._load`.
* ``{"cmd": "approve", "url", "token", "cards": [[card_id, version, args_hash], ...], "concurrency",
  "server_pid", "service_pids", "watch_redis_url"?}``: approve every card once through the admin API
  (``POST /admin/api/cards/{id}/approve``); a success is HTTP 200 with code OK and the card APPROVED.
  With ``watch_redis_url`` each approver then follows the card's history (polled every 1 ms) until
  the card reaches an outcome, and the time from the approve call returning to that event arriving
  is its approval-to-outcome latency.
* ``{"cmd": "verify", "url", "token", "tool", "label"}``: one proposal through the official
  ``mcp.Client`` and one raw, to prove the raw request is what the SDK sends.
* ``{"cmd": "totals"}``: the counts below, per label.
* ``{"cmd": "quit"}``.

The process remembers, per ``label``, how many proposals succeeded and which card ids came back, and
reports both (cumulative) with every answer: the orchestrator compares them with what is in Redis.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench._engine import (
    META,
    MODERN_VERSION,
    Command,
    Meter,
    Run,
    Window,
    call_headers,
    client_session,
    closed_loop,
    json_rpc_message,
    main,
    post,
    replicas,
    sdk_call,
)
from bench._harness import percentile

ROOM = "room-atlas"
FIRST_DAY = dt.date(2031, 1, 6)
"""Bench bookings start here, far from the demo data's dates."""
OPEN_MINUTE, SLOTS_PER_DAY = 8 * 60, 600
"""One-minute slots from 08:00 to 18:00: every index names a slot no other index overlaps."""
TITLE = "Weekly planning"
CARD_ID = re.compile(r"^crd_[0-9]{1,2}_[0-9a-f]{32}$")
OUTCOME_STATES = frozenset({"SUCCEEDED", "FAILED", "UNKNOWN", "NEEDS_RECONCILIATION", "EXPIRED", "CANCELLED"})
OUTCOME_TIMEOUT_SECONDS = 15.0

_next_index = itertools.count()
"""One counter for the whole process, so no two calls ever propose the same booking."""
_successes: Counter[str] = Counter()
_cards: defaultdict[str, set[str]] = defaultdict(set)
_failed: Counter[str] = Counter()


def booking(index: int) -> dict[str, str]:
    """The arguments of the `index`-th proposal: room-atlas, one free minute of one day."""
    day = FIRST_DAY + dt.timedelta(days=index // SLOTS_PER_DAY)
    minute = OPEN_MINUTE + index % SLOTS_PER_DAY
    return {
        "room_id": ROOM,
        "date": day.isoformat(),
        "start": f"{minute // 60:02d}:{minute % 60:02d}",
        "end": f"{(minute + 1) // 60:02d}:{(minute + 1) % 60:02d}",
        "title": TITLE,
    }


def propose_body(request_id: int, tool: str, arguments: dict[str, str]) -> bytes:
    params = {"name": tool, "arguments": arguments, "_meta": META}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message, separators=(",", ":")).encode()


def propose_headers(token: str, tool: str) -> dict[str, str]:
    """What the SDK client sends on a 2026-07-28 ``tools/call`` of `tool`."""
    return call_headers(token, tool)


def receipt_of(status: int, raw: bytes, content_type: str) -> tuple[str | None, str | None]:
    """(failure kind or None, card id) of one proposal answer."""
    if status != 200:
        return f"http_{status}", None
    try:
        message = json_rpc_message(raw, content_type)
    except ValueError:
        return "unparseable", None
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict):
        return "no_result", None
    content = result.get("structuredContent")
    if result.get("isError") or not isinstance(content, dict):
        code = content.get("error", {}).get("code", "") if isinstance(content, dict) else ""
        return f"tool_error_{code}" if code else "tool_error", None
    card_id = content.get("card_id")
    if not isinstance(card_id, str) or not CARD_ID.fullmatch(card_id):
        return "no_card_id", None
    if content.get("existing"):
        return "existing_card", card_id
    if content.get("status") != "PENDING":
        return f"status_{content.get('status')}", card_id
    return None, card_id


# --- proposals ----------------------------------------------------------------------------------


@dataclass
class ProposeRun(Run):
    remaining: int | None = None
    """Calls left to make, when the run makes a number of calls rather than running for a duration."""
    cards: list[str] = field(default_factory=list)


async def _propose_worker(
    session: aiohttp.ClientSession, url: str, tool: str, headers: dict[str, str], run: ProposeRun
) -> None:
    request_id = 0
    while not run.stop:
        if run.remaining is not None:
            if run.remaining <= 0:
                return
            run.remaining -= 1
        request_id += 1
        body = propose_body(request_id, tool, booking(next(_next_index)))
        started = time.perf_counter()
        answer = await post(session, url, body, headers, receipt_of)
        ended = time.perf_counter()
        failure, card_id = (answer, None) if isinstance(answer, str) else answer
        if failure is None and card_id is not None:
            run.completed.append((ended, ended - started))
            run.cards.append(card_id)
        else:
            await run.failed(failure or "unknown")


async def propose(command: Command) -> dict[str, Any]:
    """One closed-loop run of proposals; measured over ``[warmup, warmup + duration]`` or all ``calls``."""
    token, tool, label = command["token"], command["tool"], command["label"]
    urls, _ = replicas(command)
    state = ProposeRun(remaining=int(command["calls"]) if "calls" in command else None)
    headers = propose_headers(token, tool)
    async with client_session() as session:
        workers = [
            _propose_worker(session, urls[index % len(urls)], tool, headers, state)
            for index in range(int(command["concurrency"]))
        ]
        counted = state.remaining is not None
        warmup, duration = (0.0, None) if counted else (float(command["warmup"]), float(command["duration"]))
        window = await closed_loop(state, workers, Meter.of(command), warmup=warmup, duration=duration)
    _successes[label] += len(state.completed)
    _cards[label].update(state.cards)
    _failed[label] += sum(state.failures.values())
    answer = window.record(state.latencies(window))
    answer |= {"failures": dict(state.failures), "calls_total": len(state.completed), **_totals(label)}
    if command.get("return_cards"):
        answer["cards"] = state.cards
    return answer


def _totals(label: str) -> dict[str, int]:
    return {"successes_total": _successes[label], "cards_total": len(_cards[label])}


# --- approvals ----------------------------------------------------------------------------------


@dataclass
class ApproveState:
    queue: list[list[Any]]
    approve_latencies: list[float] = field(default_factory=list)
    outcome_latencies: list[float] = field(default_factory=list)
    ledger_latencies_ms: list[float] = field(default_factory=list)
    """Approved event to outcome event, both stamped by the Redis server's clock (ms resolution)."""
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)


def _approval_failure(status: int, raw: bytes, content_type: str) -> str | None:
    """None for an approval answered HTTP 200 with code OK and the card APPROVED, else the failure kind."""
    if status != 200:
        return f"http_{status}"
    try:
        answer = json.loads(raw)
    except ValueError:
        return "unparseable"
    if answer.get("code") != "OK" or answer.get("card", {}).get("state") != "APPROVED":
        return f"not_approved_{answer.get('card', {}).get('state')}"
    return None


async def _approve_one(
    session: aiohttp.ClientSession, url: str, card: list[Any], headers: dict[str, str]
) -> str | None:
    card_id, version, args_hash = card
    body = json.dumps({"version": int(version), "args_hash": args_hash}).encode()
    return await post(session, f"{url}/admin/api/cards/{card_id}/approve", body, headers, _approval_failure)


async def _watch(redis: Any, card_id: str) -> tuple[str, float | None]:
    """Follow a card's history until it reaches an outcome: (state, ledger ms approved->outcome).

    The history lives inside the card (see gateway/store/ledger/codec.py), which cannot be read blocking,
    so the card is polled every millisecond; that bounds the resolution of the outcome latency.
    """
    from gateway.store.ledger.codec import decode_card
    from gateway.store.ledger.layout import card_keys, card_shard

    shard = card_shard(card_id)
    assert shard is not None
    card_key = card_keys(card_id, shard)[0]
    deadline = time.perf_counter() + OUTCOME_TIMEOUT_SECONDS
    while time.perf_counter() < deadline:
        raw = await redis.get(card_key)
        events = decode_card(raw, card_id).get("events", []) if raw else []
        approved_at = next((int(e["at"]) for e in events if e.get("type") == "approved"), None)
        for event in events:
            if event.get("state") in OUTCOME_STATES:
                ledger_ms = int(event["at"]) - approved_at if approved_at is not None else None
                return event["state"], ledger_ms
        await asyncio.sleep(0.001)
    return "timeout", None


async def _approver(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], redis: Any, state: ApproveState
) -> None:
    while state.queue:
        card = state.queue.pop()
        started = time.perf_counter()
        failure = await _approve_one(session, url, card, headers)
        returned = time.perf_counter()
        if failure is not None:
            state.failures[failure] += 1
            continue
        state.approve_latencies.append(returned - started)
        if redis is None:
            continue
        outcome, ledger_ms = await _watch(redis, card[0])
        state.outcomes[outcome] += 1
        if outcome != "timeout":
            state.outcome_latencies.append(time.perf_counter() - returned)
        if ledger_ms is not None:
            state.ledger_latencies_ms.append(float(ledger_ms))


async def approve(command: Command) -> dict[str, Any]:
    """Approve every card given, `concurrency` at a time; optionally follow each to its outcome."""
    import redis.asyncio as aioredis

    url, token = command["url"], command["token"]
    meter = Meter.of(command)
    state = ApproveState(queue=list(reversed(command["cards"])))
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
    watch_url = command.get("watch_redis_url")
    redis = aioredis.from_url(watch_url, decode_responses=False) if watch_url else None  # cards are packed bytes
    try:
        async with client_session() as session:
            start = meter.read()
            approvers = [_approver(session, url, headers, redis, state) for _ in range(int(command["concurrency"]))]
            await asyncio.gather(*approvers)
            window = Window(start, meter.read())
    finally:
        if redis is not None:
            await redis.aclose()
    answer = window.record(sorted(state.approve_latencies))
    outcome = sorted(state.outcome_latencies)
    ledger = sorted(state.ledger_latencies_ms)
    answer |= {
        "failures": dict(state.failures),
        "outcomes": dict(state.outcomes),
        "outcome_p50_ms": percentile(outcome, 0.50) * 1000,
        "outcome_p99_ms": percentile(outcome, 0.99) * 1000,
        "outcome_max_ms": outcome[-1] * 1000 if outcome else float("nan"),
        "outcome_samples": len(outcome),
        "ledger_p50_ms": percentile(ledger, 0.50),
        "ledger_p99_ms": percentile(ledger, 0.99),
    }
    return answer


# --- verification with the official client ------------------------------------------------------


async def verify(command: Command) -> dict[str, Any]:
    """One proposal with ``mcp.Client`` and one raw; both must file a new PENDING card."""
    url, token, tool, label = command["url"], command["token"], command["tool"], command["label"]
    result = await sdk_call(url, token, tool, booking(next(_next_index)), mode=MODERN_VERSION)
    content = result.structured_content or {}
    card_id = content.get("card_id")
    if result.is_error or content.get("status") != "PENDING" or not isinstance(card_id, str):
        return {"error": f"mcp.Client proposal failed at {url}: {result.model_dump_json()[:300]}"}
    _successes[label] += 1
    _cards[label].add(card_id)
    async with client_session() as session:
        body = propose_body(1, tool, booking(next(_next_index)))
        async with session.post(url, data=body, headers=propose_headers(token, tool)) as response:
            raw = await response.read()
            failure, raw_card = receipt_of(response.status, raw, response.content_type)
            content_type = response.content_type
    if failure is not None or raw_card is None:
        return {"error": f"raw proposal failed at {url}: {failure}: {raw[:300]!r}"}
    _successes[label] += 1
    _cards[label].add(raw_card)
    return {"receipt_keys": sorted(content), "raw_content_type": content_type, "raw_bytes": len(raw), **_totals(label)}


async def totals(command: Command) -> dict[str, Any]:
    """Successful proposals, distinct card ids and failed calls so far, per label."""
    labels = set(_successes) | set(_cards) | set(_failed)
    return {label: {**_totals(label), "failed_total": _failed[label]} for label in sorted(labels)}


if __name__ == "__main__":
    main({"propose": propose, "approve": approve, "verify": verify, "totals": totals})
