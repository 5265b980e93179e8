"""The write-path load generator: ``python -m bench._write_load``, driven by JSON lines on stdin.

Same shape and the same cheap client as `bench._load` (raw aiohttp POSTs on keep-alive connections,
uvloop, every answer checked), for the three things the write path does:

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
import contextlib
import datetime as dt
import itertools
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench._harness import cpu_seconds, percentile
from bench._load import (
    _META,
    DRAIN_TIMEOUT_SECONDS,
    MODERN_VERSION,
    REQUEST_TIMEOUT_SECONDS,
    base_headers,
    json_rpc_message,
    replicas,
)

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
    params = {"name": tool, "arguments": arguments, "_meta": _META}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message, separators=(",", ":")).encode()


def propose_headers(token: str, tool: str) -> dict[str, str]:
    """What the SDK client sends on a 2026-07-28 ``tools/call`` (as `bench._load.modern_headers`)."""
    return {**base_headers(token), "mcp-protocol-version": MODERN_VERSION, "mcp-method": "tools/call", "mcp-name": tool}


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
class RunState:
    stop: bool = False
    remaining: int | None = None
    completed: list[tuple[float, float]] = field(default_factory=list)
    cards: list[str] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)


async def _propose_worker(
    session: aiohttp.ClientSession, url: str, tool: str, headers: dict[str, str], state: RunState
) -> None:
    request_id = 0
    while not state.stop:
        if state.remaining is not None:
            if state.remaining <= 0:
                return
            state.remaining -= 1
        request_id += 1
        body = propose_body(request_id, tool, booking(next(_next_index)))
        started = time.perf_counter()
        try:
            async with session.post(url, data=body, headers=headers) as response:
                raw = await response.read()
                failure, card_id = receipt_of(response.status, raw, response.content_type)
        except (aiohttp.ClientError, TimeoutError) as error:
            failure, card_id = type(error).__name__, None
        ended = time.perf_counter()
        if failure is None and card_id is not None:
            state.completed.append((ended, ended - started))
            state.cards.append(card_id)
        else:
            state.failures[failure or "unknown"] += 1
            await asyncio.sleep(0.01)  # a failing server must not turn the loop into a busy spin


async def propose(command: dict[str, Any]) -> dict[str, Any]:
    """One closed-loop run of proposals; measured over ``[warmup, warmup + duration]`` or all ``calls``."""
    token, tool, label = command["token"], command["tool"], command["label"]
    concurrency = int(command["concurrency"])
    urls, server_pids = replicas(command)
    service_pids = [int(pid) for pid in command.get("service_pids", [])]
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
    state = RunState(remaining=int(command["calls"]) if "calls" in command else None)
    headers = propose_headers(token, tool)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        workers = [asyncio.create_task(_propose_worker(session, urls[index % len(urls)], tool, headers, state))
                   for index in range(concurrency)]  # fmt: skip
        try:
            if state.remaining is None:
                await asyncio.sleep(float(command["warmup"]))
            t0, cpu0, services0, own0 = time.perf_counter(), _cpu_sum(server_pids), _cpu_sum(service_pids), _own()
            if state.remaining is None:
                await asyncio.sleep(float(command["duration"]))
            else:
                await asyncio.gather(*workers)
            t1, cpu1, services1, own1 = time.perf_counter(), _cpu_sum(server_pids), _cpu_sum(service_pids), _own()
        finally:
            state.stop = True
            await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), DRAIN_TIMEOUT_SECONDS)
    _successes[label] += len(state.completed)
    _cards[label].update(state.cards)
    _failed[label] += sum(state.failures.values())
    latencies = sorted(latency for end, latency in state.completed if t0 <= end <= t1)
    answer = _window(latencies, t1 - t0, cpu1 - cpu0, services1 - services0, own1 - own0)
    answer |= {"failures": dict(state.failures), "calls_total": len(state.completed), **_totals(label)}
    if command.get("return_cards"):
        answer["cards"] = state.cards
    return answer


def _window(latencies: list[float], seconds: float, server: float, services: float, own: float) -> dict[str, Any]:
    calls = len(latencies)
    per_call = (lambda cpu: cpu / calls * 1e6) if calls else (lambda cpu: float("nan"))
    return {
        "calls": calls,
        "seconds": seconds,
        "calls_per_s": calls / seconds,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "server_cpu_us_per_call": per_call(server),
        "server_cpu_share": server / seconds,
        "services_cpu_us_per_call": per_call(services),
        "load_cpu_us_per_call": per_call(own),
        "other_core_share": (services + own) / seconds,
    }


def _totals(label: str) -> dict[str, int]:
    return {"successes_total": _successes[label], "cards_total": len(_cards[label])}


def _cpu_sum(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def _own() -> float:
    return cpu_seconds(os.getpid())


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


async def _approve_one(
    session: aiohttp.ClientSession, url: str, card: list[Any], headers: dict[str, str]
) -> str | None:
    card_id, version, args_hash = card
    body = json.dumps({"version": int(version), "args_hash": args_hash}).encode()
    try:
        async with session.post(f"{url}/admin/api/cards/{card_id}/approve", data=body, headers=headers) as response:
            raw = await response.read()
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as error:
        return type(error).__name__
    if status != 200:
        return f"http_{status}"
    try:
        answer = json.loads(raw)
    except ValueError:
        return "unparseable"
    if answer.get("code") != "OK" or answer.get("card", {}).get("state") != "APPROVED":
        return f"not_approved_{answer.get('card', {}).get('state')}"
    return None


async def _watch(redis: Any, card_key: str) -> tuple[str, float | None]:
    """Follow a card's history until it reaches an outcome: (state, ledger ms approved->outcome).

    The history lives inside the card (see gateway/store/ledger/codec.py), which cannot be read blocking,
    so the card is polled every millisecond; that bounds the resolution of the outcome latency.
    """
    from gateway.store.ledger.codec import decode_card

    deadline = time.perf_counter() + OUTCOME_TIMEOUT_SECONDS
    while time.perf_counter() < deadline:
        raw = await redis.get(card_key)
        events = decode_card(raw, card_key.rpartition(":")[2]).get("events", []) if raw else []
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
    from gateway.store.ledger.redis_ledger import RedisLedger, card_shard

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
        shard = card_shard(card[0])
        assert shard is not None
        outcome, ledger_ms = await _watch(redis, RedisLedger._keys(card[0], shard)[0])
        state.outcomes[outcome] += 1
        if outcome != "timeout":
            state.outcome_latencies.append(time.perf_counter() - returned)
        if ledger_ms is not None:
            state.ledger_latencies_ms.append(float(ledger_ms))


async def approve(command: dict[str, Any]) -> dict[str, Any]:
    """Approve every card given, `concurrency` at a time; optionally follow each to its outcome."""
    import redis.asyncio as aioredis

    url, token = command["url"], command["token"]
    server_pid = int(command["server_pid"])
    service_pids = [int(pid) for pid in command.get("service_pids", [])]
    state = ApproveState(queue=list(reversed(command["cards"])))
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
    watch_url = command.get("watch_redis_url")
    redis = aioredis.from_url(watch_url, decode_responses=False) if watch_url else None  # cards are packed bytes
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    try:
        async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
        ) as session:
            t0, cpu0, services0, own0 = time.perf_counter(), cpu_seconds(server_pid), _cpu_sum(service_pids), _own()
            approvers = [_approver(session, url, headers, redis, state) for _ in range(int(command["concurrency"]))]
            await asyncio.gather(*approvers)
            t1, cpu1, services1, own1 = time.perf_counter(), cpu_seconds(server_pid), _cpu_sum(service_pids), _own()
    finally:
        if redis is not None:
            await redis.aclose()
    answer = _window(sorted(state.approve_latencies), t1 - t0, cpu1 - cpu0, services1 - services0, own1 - own0)
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


async def verify(command: dict[str, Any]) -> dict[str, Any]:
    """One proposal with ``mcp.Client`` and one raw; both must file a new PENDING card."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    url, token, tool, label = command["url"], command["token"], command["tool"], command["label"]
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=MODERN_VERSION) as client:  # type: ignore[arg-type]
            result = await client.call_tool(tool, booking(next(_next_index)))
    content = result.structured_content or {}
    card_id = content.get("card_id")
    if result.is_error or content.get("status") != "PENDING" or not isinstance(card_id, str):
        return {"error": f"mcp.Client proposal failed at {url}: {result.model_dump_json()[:300]}"}
    _successes[label] += 1
    _cards[label].add(card_id)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)) as session:
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


# --- command loop -------------------------------------------------------------------------------


async def totals(command: dict[str, Any]) -> dict[str, Any]:
    """Successful proposals, distinct card ids and failed calls so far, per label."""
    labels = set(_successes) | set(_cards) | set(_failed)
    return {label: {**_totals(label), "failed_total": _failed[label]} for label in sorted(labels)}


_COMMANDS = {"propose": propose, "approve": approve, "verify": verify, "totals": totals}


async def serve_commands() -> None:
    """Answer commands from stdin until ``quit`` or end of input."""
    print(json.dumps({"pid": os.getpid()}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        command = json.loads(line)
        if command["cmd"] == "quit":
            return
        try:
            answer = await _COMMANDS[command["cmd"]](command)
        except Exception as error:  # reported to the orchestrator, which stops the benchmark
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)


def main() -> None:
    import uvloop

    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve_commands())


if __name__ == "__main__":
    main()
