"""`countersign adapters ...` against a real Redis: review, accept by hash, remove, import-openapi."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from backends.expenses import expenses_manifest
from gateway.cli.main import main
from gateway.config.org_adapters import OrgAdapters
from gateway.principal import KeyKind, Principal
from gateway.registry.service import RegistryService
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.registrations import RegistryStore
from tests.support.agents import make_key
from tests.support.services import TEST_AUDIT_SECRET, Backend

AUDIT_SECRET = TEST_AUDIT_SECRET.encode()

pytestmark = pytest.mark.anyio

SPEC = Path(__file__).parents[1] / "data" / "billing-openapi.json"


@pytest.fixture(scope="module", name="redis_url")
def adapters_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest)."""
    return quiet_redis_url


async def _cli(redis_url: str, key: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    # The demo's orgs (acme serves expenses), on the test's Redis, with the test's audit secret.
    environ = {"COUNTERSIGN_REDIS_URL": redis_url, "COUNTERSIGN_MODE": "demo", "COUNTERSIGN_ADMIN_KEY": key,
               "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}  # fmt: skip
    status = await anyio.to_thread.run_sync(lambda: main(list(args), environ))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


async def test_review_accept_and_remove_from_the_cli(
    redis: Redis, redis_url: str, expenses: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    """A proposal is listed with its diff, accepted only with its hash, and removed."""
    service = Principal(subject="expenses-svc", org="acme", roles=frozenset(), kind=KeyKind.SERVICE, key_id="k")
    registry = RegistryService(RegistryStore(redis), RedisStreamAuditSink(redis, secret=AUDIT_SECRET),
                               allowed_base_urls=("http://127.0.0.1:*",), served_tool_names=frozenset,
                               refresh=_nothing, lease_seconds=30.0, org_adapters=OrgAdapters())  # fmt: skip
    proposal = await registry.register(service, "expenses", expenses_manifest(expenses.url))
    assert proposal.ok and proposal.registration is not None
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))

    status, out, _ = await _cli(redis_url, admin, capsys, "adapters", "review")
    assert status == 0 and "expenses  new" in out and "added: expenses_get" in out
    # Every proposed tool as a reviewer reads it, not only its name.
    assert "  tool expenses_get (read): GET /reports/{report_id}" in out, out
    assert "  input report_id: string required, in path" in out
    status, _, err = await _cli(redis_url, admin, capsys, "adapters", "accept", "expenses", "--hash", "sha256:x")
    assert status == 1 and "CONFLICT" in err
    proposed = proposal.registration.proposed_hash or ""
    status, out, _ = await _cli(redis_url, admin, capsys, "adapters", "accept", "expenses", "--hash", proposed)
    assert status == 0
    assert (await RegistryStore(redis).get("expenses")).state == "active"  # type: ignore[union-attr]
    status, _, _ = await _cli(redis_url, admin, capsys, "adapters", "remove", "expenses")
    assert status == 0 and await RegistryStore(redis).get("expenses") is None


async def test_import_openapi_prints_a_draft_and_what_it_could_not_decide(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The draft is JSON on stdout; undecided points are on stderr and make the exit status 1."""
    status, out, err = await _cli(redis_url, "", capsys, "adapters", "import-openapi", str(SPEC), "--name", "billing")
    draft = json.loads(out)
    assert status == 1 and draft["tools"] and all(t["name"].startswith("billing_") for t in draft["tools"])
    assert "problem:" in err


async def _nothing() -> bool:
    return False
