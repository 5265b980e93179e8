"""The servers counted call by call (`bench/instructions.py`, `bench/call_counts.py`), and the calls sent them.

Both start Redis, the backends and an agent key as `read_path.py` does, then each server of a path in
turn, wrapped or instrumented as the caller asks, and send it exactly as many calls as they count.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench._engine import REQUEST_TIMEOUT_SECONDS
from bench._harness import READY_TIMEOUT_SECONDS, Child, redis_server, start_python
from bench._load import call_body, failure_of, modern_headers
from bench._servers import fresh_secrets
from bench._write_load import booking, propose_body, propose_headers, receipt_of
from bench.read_path import create_key

__all__ = ["READS", "WRITES", "Variant", "send_calls", "servers_in_turn"]


@dataclass(frozen=True)
class Variant:
    """One server under count and the call it is sent."""

    name: str
    kind: str
    """`bench._servers` subcommand."""
    tool: str
    extra: tuple[str, ...] = ()


READS = (
    Variant("gateway", "gateway", "rooms_availability", ("--no-worker",)),
    Variant("bare", "bare", "rooms_availability"),
)
"""The read gateway runs without its worker here (`read_path.py` runs it): the worker's sweeps are work of
the clock, not of a read (9.5 M instructions a second idle under valgrind against 0.8 M without it, a
quarter of a c=1 window's count), and under load they fall behind, so subtracting their idle rate took
more than they did (3.54 M a read at c=8 with the worker, 3.89 M without)."""
WRITES = (
    Variant("gateway", "gateway", "rooms_book", ("--no-worker",)),
    Variant("bare+GET", "bare-write", "rooms_book_checked"),
    Variant("bare", "bare-write", "rooms_book"),
)


@contextlib.contextmanager
def servers_in_turn(
    write: bool,
    logs: Path,
    *,
    wrapper: Sequence[str] = (),
    env: dict[str, str] | None = None,
    ready_timeout: float = READY_TIMEOUT_SECONDS,
) -> Iterator[Iterator[tuple[Variant, Child, str]]]:
    """Redis, the backends and an agent key; inside, an iterator that starts each server of the path in
    turn (``wrapper`` before its interpreter, ``env`` added to its environment) and yields it with the
    agent's token, stopping it when the next is asked for."""
    with contextlib.ExitStack() as stack:
        _redis, redis_url = stack.enter_context(redis_server(frozenset(), logs, appendfsync="everysec"))
        tokens = fresh_secrets()
        backends = start_python("backends", "bench._servers", ["backends"], cores=frozenset(), log_dir=logs, env=tokens)
        stack.callback(backends.stop)
        token = create_key(redis_url)

        def each() -> Iterator[tuple[Variant, Child, str]]:
            for index, variant in enumerate(WRITES if write else READS):
                # The gateway on the database its agent key is in; each bare server on a database of its own.
                database = redis_url if variant.kind == "gateway" else f"{redis_url.rsplit('/', 1)[0]}/{index}"
                rooms = backends.ready["rooms"]
                argv = ["--loop", "uvloop", variant.kind, "--redis-url", database, "--rooms-url", rooms]
                if variant.kind == "gateway":
                    argv += ["--orders-url", backends.ready["orders"], *variant.extra]
                child = start_python(
                    variant.name,
                    "bench._servers",
                    argv,
                    cores=frozenset(),
                    log_dir=logs,
                    env={**tokens, **(env or {})},
                    wrapper=wrapper,
                    ready_timeout=ready_timeout,
                )
                try:
                    yield variant, child, token
                finally:
                    child.stop()

        yield each()


_requests = itertools.count(1)
_bookings = itertools.count()


async def send_calls(
    url: str, token: str, variant: Variant, calls: int, concurrency: int, *, write: bool, slowdown: float = 1.0
) -> Counter[str]:
    """Exactly `calls` calls, `concurrency` at a time; the failures by kind (none expected). `slowdown`
    stretches the request timeout for a server that runs slower than at full speed (under valgrind)."""
    failures: Counter[str] = Counter()
    left = iter(range(calls))
    headers = propose_headers(token, variant.tool) if write else modern_headers(token)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS * slowdown)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def worker() -> None:
            for _ in left:
                request_id = next(_requests)
                body = (
                    propose_body(request_id, variant.tool, booking(next(_bookings)))
                    if write
                    else call_body(request_id, "modern")
                )
                async with session.post(url, data=body, headers=headers) as response:
                    raw = await response.read()
                    status, kind = response.status, response.content_type
                failure = receipt_of(status, raw, kind)[0] if write else failure_of(status, raw, kind)
                if failure is not None:
                    failures[failure] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failures
