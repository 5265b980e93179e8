"""A second gateway for registered-tool tests, where org acme enables the adapter ``notes``.

``notes`` is no demo service: tests register it by manifest against a `PlantedBackend` that answers
whatever they planted. It lives on database 7 of the session's Redis, so the session gateway and its
tests never see it, and re-registering it at another address disturbs no other gateway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from redis.asyncio import Redis
from starlette.datastructures import Secret

from backends.serve import serve_app_in_thread
from gateway.config.settings import OrgSettings, Settings
from gateway.runtime.app import create_app
from tests.support.github_spec import GitHubSpec, github_spec_or_skip, serve_prism
from tests.support.planted import PlantedBackend, serve_planted
from tests.support.services import NOTES_SIGNING_KEY, TEST_AUDIT_SECRET
from tests.support.signing import client_keeping_signing_key, signing_key_before_start


@pytest.fixture(scope="session")
def notes_redis_url(redis_server_url: str) -> str:
    return urlunsplit(urlsplit(redis_server_url)._replace(path="/7"))


@pytest.fixture(scope="session")
def notes_mcp_url(notes_redis_url: str) -> Iterator[str]:
    """The MCP endpoint of a gateway with no configured backend and no worker; acme may use registered ``notes``."""
    org = OrgSettings(name="acme", adapters=frozenset({"notes"}), roles=frozenset({"staff", "approver", "registry"}))
    settings = Settings(
        redis_url=notes_redis_url, adapters={}, orgs=(org,), registry_poll_seconds=0.2, run_worker=False,
        audit_secret=Secret(TEST_AUDIT_SECRET), secrets={"NOTES_SIGNING_KEY": NOTES_SIGNING_KEY},
    )  # fmt: skip
    signing_key_before_start(notes_redis_url)
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        yield f"{base}/mcp"


@pytest.fixture
async def notes_redis(notes_redis_url: str) -> AsyncIterator[Redis]:
    """A client on the notes gateway's database, flushed before and after the test but for the gateway's
    signing key (`tests.support.signing`)."""
    async with client_keeping_signing_key(notes_redis_url) as client:
        yield client


@pytest.fixture(scope="session")
def planted_backend() -> Iterator[tuple[str, PlantedBackend]]:
    """The service behind ``notes``: answers what a test planted, records the raw paths it is sent."""
    with serve_planted() as served:
        yield served


@pytest.fixture(scope="session")
def github_spec() -> GitHubSpec:
    """GitHub's pinned OpenAPI description and Prism (installed into the cache on first use; CI: fail, never skip)."""
    return github_spec_or_skip()


@pytest.fixture(scope="session")
def github_prism(github_spec: GitHubSpec, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prism serving GitHub's whole description: the base URL of a backend that answers like api.github.com."""
    log: Path = tmp_path_factory.mktemp("prism") / "prism.log"
    with serve_prism(github_spec, github_spec.spec, log) as url:
        yield url
