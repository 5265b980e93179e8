"""Shared fixtures: a real Redis for the whole session, and a flushed client per test.

``redis_url`` reuses the server named by ``--redis-url`` or ``COUNTERSIGN_TEST_REDIS_URL``;
otherwise it starts a throwaway server with the AOF on, so the gateway's durability check passes
against it. Tests on a shared server must not assume it is otherwise empty: ``redis`` flushes
the database before and after each test.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
from _redis_server import start_redis_server
from redis.asyncio import Redis


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--redis-url",
        default=None,
        help="use this Redis for tests instead of starting one (also: COUNTERSIGN_TEST_REDIS_URL)",
    )


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_url(pytestconfig: pytest.Config) -> Iterator[str]:
    """The URL of a real Redis-compatible server that lives for the whole session."""
    given = pytestconfig.getoption("--redis-url") or os.environ.get("COUNTERSIGN_TEST_REDIS_URL")
    if given:
        yield given
        return
    with start_redis_server(appendonly=True) as url:
        yield url


@pytest.fixture(name="redis")
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    """A client (bytes replies) on an empty database, flushed again and closed after the test."""
    client = Redis.from_url(redis_url, decode_responses=False)
    try:
        await client.flushdb()
        yield client
        await client.flushdb()
    finally:
        await client.aclose()
