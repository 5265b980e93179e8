"""Shared fixtures: a real Redis for the whole session, and a flushed client per test.

``redis_url`` reuses the server named by ``--redis-url`` or ``COUNTERSIGN_TEST_REDIS_URL``;
otherwise it starts a throwaway server with the AOF on, so the gateway's durability check passes
against it. Tests on a shared server must not assume it is otherwise empty: ``redis`` flushes
the database before and after each test.

Property tests run the ``ci`` Hypothesis profile when ``CI`` is set and ``dev`` otherwise
(`tests.support.examples`); the header of every run names the one loaded.

A run writes bytecode even on a machine that says not to (``PYTHONDONTWRITEBYTECODE``): otherwise every
test process compiles every module and rewrites every test's asserts again (about seven seconds of CPU
each, every run), and so does every Python process a test starts (the CLI, a second gateway).

The test processes, and the processes they start, trust no TLS server (`tests.support.trust_store`): no test
uses TLS, and loading the machine's trust store into every HTTP client a run builds cost about 45 s of CPU.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from redis.asyncio import Redis

from backends.expenses import create_expenses_app
from backends.serve import serve_app_in_thread
from gateway.runtime.app import create_app
from tests.support.examples import load_profile
from tests.support.mcp_servers import NodeServer, install_filesystem_server, installed_or_skipped
from tests.support.redis_server import flushed_client, start_redis_server
from tests.support.services import EXPENSES_SIGNING_KEY, Backend, gateway_settings, serve_backends
from tests.support.signing import client_keeping_signing_key, signing_key_before_start
from tests.support.trust_store import trust_nothing

HYPOTHESIS_PROFILE = load_profile(os.environ)


def pytest_configure(config: pytest.Config) -> None:
    # Before xdist starts its workers (which inherit the environment), and for the test modules this
    # process imports from now on (pytest writes their rewritten asserts unless told not to).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    trust_nothing(os.environ)


def pytest_report_header() -> str:
    return f"hypothesis profile: {HYPOTHESIS_PROFILE} (tests/support/examples.py)"


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
def redis_server_url(pytestconfig: pytest.Config) -> Iterator[str]:
    """The URL of a real Redis-compatible server that lives for the whole session."""
    given = pytestconfig.getoption("--redis-url") or os.environ.get("COUNTERSIGN_TEST_REDIS_URL")
    if given:
        yield given
        return
    with start_redis_server(appendonly=True) as url:
        yield url


@pytest.fixture(scope="session")
def redis_url(redis_server_url: str) -> str:
    """Database 0 of the session's server: where the session gateway (`mcp_url`) and its worker live."""
    return redis_server_url


@pytest.fixture(scope="session")
def quiet_redis_url(redis_server_url: str) -> str:
    """Database 3 of the same server: no worker runs there.

    The session gateway (`mcp_url`) runs a worker on database 0 that drains the outbox, so tests of
    the ledger and the card service, which drive transitions by hand, point `redis_url` here.
    """
    return urlunsplit(urlsplit(redis_server_url)._replace(path="/3"))


@pytest.fixture(name="redis")
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    """A client (bytes replies) on a database holding only the gateway's signing key (an operator makes the
    first one: `tests.support.signing`), flushed again and closed after the test."""
    async with client_keeping_signing_key(redis_url) as client:
        yield client


@pytest.fixture
async def quiet(quiet_redis_url: str) -> AsyncIterator[Redis]:
    """A client (bytes replies) on the database no worker drains (`quiet_redis_url`), flushed before and
    after the test: for tests that move cards (or outbox entries) by hand and must find them where they
    left them."""
    async with flushed_client(quiet_redis_url) as client:
        yield client


@pytest.fixture(scope="module")
def own_redis_url() -> Iterator[str]:
    """A server of the requesting module's own (one per module), without AOF: for tests that count round
    trips in the server-wide command statistics, which the session's background gateways move on the
    shared server."""
    with start_redis_server(appendonly=False) as url:
        yield url


@pytest.fixture
async def own_redis(own_redis_url: str) -> AsyncIterator[Redis]:
    """A client (bytes replies) on the module's own server (`own_redis_url`), its database flushed first."""
    client = Redis.from_url(own_redis_url)
    try:
        await client.flushdb()
        yield client
    finally:
        await client.aclose()


@pytest.fixture(scope="session")
def backends() -> Iterator[dict[str, Backend]]:
    """The rooms and orders services, each with its own credential and identity signing key for the gateway."""
    with serve_backends() as started:
        yield started


@pytest.fixture
def clean_backends(backends: dict[str, Backend]) -> Iterator[dict[str, Backend]]:
    """The session backends, with faults cleared after the test."""
    yield backends
    for backend in backends.values():
        backend.clear_faults()


@pytest.fixture(scope="session")
def expenses() -> Iterator[Backend]:
    """The expenses service: not configured in the gateway, offered only by manifest registration."""
    token = secrets.token_urlsafe(16)
    app = create_expenses_app(service_token=token, signing_key=EXPENSES_SIGNING_KEY)
    with serve_app_in_thread(app) as url:
        yield Backend(url=url, token=token, app=app, signing_key=EXPENSES_SIGNING_KEY)


@pytest.fixture(scope="session")
def mcp_url(redis_url: str, backends: dict[str, Backend], expenses: Backend) -> Iterator[str]:
    """A real gateway under uvicorn for the session; tests create their keys after the flush."""
    signing_key_before_start(redis_url)
    app = create_app(gateway_settings(redis_url, backends, expenses=expenses))
    with serve_app_in_thread(app, lifespan=True) as base:
        yield f"{base}/mcp"


@pytest.fixture(scope="session")
def filesystem_server() -> NodeServer:
    """The pinned reference filesystem MCP server (npm), installed into the cache once: the upstream tests, the
    CLI's and ``policy explain``'s front it."""
    return installed_or_skipped("the filesystem MCP server", install_filesystem_server)
