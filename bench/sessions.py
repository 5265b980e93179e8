"""What a 2025-11-25 session costs the gateway in memory, and that the session quota gives it back.

    python bench/sessions.py                   # 20 keys x 25 sessions, about 30 s
    python bench/sessions.py --keys 40 --per-key 30 --hold 60

Starts Redis, the demo backends and the gateway (default settings, no worker) as child processes,
then opens sessions the way an MCP client does (``initialize``, ``notifications/initialized``, one
``tools/list``) with no GET stream, so they stay idle. The gateway's RSS (``/proc/<pid>/status``) is
read before, after opening them, after holding them for ``--hold`` seconds, after closing them all
with DELETE, and after opening as many again; the per-session figure is the growth divided by the
number of sessions. Python keeps freed memory for reuse rather than returning it, so RSS does not
fall after closing; what shows a leak or its absence is the second opening. With ``--per-key 32``
(the default cap) it also checks the quota: one more ``initialize`` for a key at its cap is 429.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._harness import memory_kib, redis_server, start_python  # noqa: E402
from bench._servers import fresh_secrets  # noqa: E402

PROTOCOL = "2025-11-25"
HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": PROTOCOL}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}


def _keys(redis_url: str, count: int) -> list[str]:
    import redis.asyncio as aioredis

    from gateway.principal import KeyKind
    from gateway.store.keys import KeyStore

    async def create() -> list[str]:
        client = aioredis.from_url(redis_url)
        try:
            store = KeyStore(client)
            return [
                (await store.create(kind=KeyKind.AGENT, subject=f"s{n}@acme.example", org="acme", roles=("staff",)))[0]
                for n in range(count)
            ]
        finally:
            await client.aclose()

    return asyncio.run(create())


def _open(http: httpx.Client, url: str, token: str) -> httpx.Response:
    auth = {"authorization": f"Bearer {token}", **HEADERS}
    return http.post(url, json=INITIALIZE, headers=auth)


def _session(http: httpx.Client, url: str, token: str) -> str:
    """Open one session as a client does, list the tools once, and leave it idle."""
    opened = _open(http, url, token)
    opened.raise_for_status()
    session = opened.headers["mcp-session-id"]
    auth = {"authorization": f"Bearer {token}", "mcp-session-id": session, **HEADERS}
    http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=auth).raise_for_status()
    listed = http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=auth)
    listed.raise_for_status()
    return session


def _close(http: httpx.Client, url: str, token: str, session: str) -> None:
    http.delete(url, headers={"authorization": f"Bearer {token}", "mcp-session-id": session, **HEADERS})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/sessions.py")
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--per-key", type=int, default=25, help="sessions per key (the default cap is 32)")
    parser.add_argument("--hold", type=float, default=10.0, help="seconds to hold the sessions open")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as logs, contextlib.ExitStack() as stack:
        log_dir = Path(logs)
        _redis, redis_url = stack.enter_context(redis_server(frozenset(), log_dir))
        secrets = fresh_secrets()
        backends = start_python(
            "backends", "bench._servers", ["backends"], cores=frozenset(), log_dir=log_dir, env=secrets
        )
        stack.callback(backends.stop)
        argv_gateway = ["gateway", "--redis-url", redis_url, "--rooms-url", backends.ready["rooms"]]
        argv_gateway += ["--orders-url", backends.ready["orders"], "--no-worker"]
        gateway = start_python(
            "gateway", "bench._servers", argv_gateway, cores=frozenset(), log_dir=log_dir, env=secrets
        )
        stack.callback(gateway.stop)
        url, pid = f"{gateway.ready['url']}/mcp", gateway.ready["pid"]
        tokens = _keys(redis_url, args.keys)
        rss: dict[str, int] = {}
        with httpx.Client(timeout=10) as http:
            _close(http, url, tokens[0], _session(http, url, tokens[0]))  # warm every code path once
            time.sleep(1)
            rss["before"] = memory_kib(pid)
            sessions: list[tuple[str, str]] = []
            for token in tokens:
                sessions += [(token, _session(http, url, token)) for _ in range(args.per_key)]
            rss["opened"] = memory_kib(pid)
            time.sleep(args.hold)
            rss["held"] = memory_kib(pid)
            refused: dict[str, Any] = {}
            if args.per_key >= 32:
                answer = _open(http, url, tokens[0])
                refused = {"status": answer.status_code, "data": answer.json()["error"].get("data")}
            for token, session in sessions:
                _close(http, url, token, session)
            time.sleep(1)
            rss["closed"] = memory_kib(pid)
            # The same number again: if closing leaked, RSS grows by as much again; if not, freed memory is reused.
            again = [(token, _session(http, url, token)) for token in tokens for _ in range(args.per_key)]
            rss["reopened"] = memory_kib(pid)
            for token, session in again:
                _close(http, url, token, session)
        count = len(sessions)
        print(f"{count} sessions ({args.keys} keys x {args.per_key}), held {args.hold:g} s; gateway RSS in KiB:")
        for name, value in rss.items():
            print(f"  {name:>7}: {value:,}")
        for label, (start, end) in {
            "per session while open": ("before", "opened"),
            "per session after the hold": ("before", "held"),
            "kept per session after closing all": ("before", "closed"),
            "growth per session when as many open again": ("closed", "reopened"),
        }.items():
            print(f"  {label}: {(rss[end] - rss[start]) * 1024 / count / 1000:.1f} kB")
        if refused:
            print(f"  one more initialize at the cap: {refused}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
