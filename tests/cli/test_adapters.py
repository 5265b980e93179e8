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
    assert proposal.ok and proposal.entry is not None
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))

    status, out, _ = await _cli(redis_url, admin, capsys, "adapters", "review")
    assert status == 0 and "expenses  new" in out and "added: expenses_get" in out
    # Every proposed tool as a reviewer reads it, not only its name.
    assert "  tool expenses_get (read): GET /reports/{report_id}" in out, out
    assert "  input report_id: string required, in path" in out
    status, _, err = await _cli(redis_url, admin, capsys, "adapters", "accept", "expenses", "--hash", "sha256:x")
    assert status == 1 and "CONFLICT" in err
    proposed = proposal.entry.proposed_hash or ""
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


async def test_a_split_import_names_one_secret_per_adapter_and_each_registers(
    redis: Redis, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--split`` turns the overlay's one credential (``BILLING_API_TOKEN``, written for ``billing``) into one per
    adapter, in each adapter's own namespace, says which variables the operator must set, and each draft passes
    the registry's namespace rule: the split adapter ``billinginvoices`` registers with
    ``BILLINGINVOICES_API_TOKEN``, which it could not with ``BILLING_API_TOKEN``."""
    overlay = tmp_path / "overlay.json"
    credential = {"secret_env": "BILLING_API_TOKEN", "scheme": "basic", "username_env": "BILLING_API_USER"}
    overlay.write_text(json.dumps({"access": {"roles": ["staff"]}, "credential": credential}))
    status, _, err = await _cli(
        redis_url, "", capsys, "adapters", "import", str(SPEC), "--name", "billing", "--split",
        "--operations", "listInvoices,getCustomerBalance", "--overlay", str(overlay),
        "--base-url", "http://127.0.0.1:9", "--out", str(tmp_path / "drafts"),
    )  # fmt: skip
    assert status == 0, err
    assert "secret: set BILLINGINVOICES_API_TOKEN on the gateway host (credential.secret_env)" in err
    assert "secret: set BILLINGINVOICES_API_USER on the gateway host (credential.username_env)" in err
    assert "secret: set BILLING_API_TOKEN on the gateway host (credential.secret_env)" in err  # the untagged one
    assert "note: credential.secret_env: BILLING_API_TOKEN becomes BILLINGINVOICES_API_TOKEN" in err
    drafts = {path.stem: json.loads(path.read_text()) for path in (tmp_path / "drafts").iterdir()}
    assert drafts["billinginvoices"]["credential"] == {
        "secret_env": "BILLINGINVOICES_API_TOKEN", "scheme": "basic", "username_env": "BILLINGINVOICES_API_USER",
    }  # fmt: skip
    service = Principal(subject="billing-svc", org="acme", roles=frozenset(), kind=KeyKind.SERVICE, key_id="k")
    registry = RegistryService(RegistryStore(redis), RedisStreamAuditSink(redis, secret=AUDIT_SECRET),
                               allowed_base_urls=("http://127.0.0.1:*",), served_tool_names=frozenset,
                               refresh=_nothing, lease_seconds=30.0, org_adapters=OrgAdapters())  # fmt: skip
    for name, manifest in drafts.items():
        registered = await registry.register(service, name, manifest)
        assert registered.ok, (name, registered.problems)
    # The overlay's reference as written is outside the split adapter's namespace: the registry refuses it.
    unsplit = drafts["billinginvoices"] | {"credential": credential}
    refused = await registry.register(service, "billinginvoices", unsplit)
    assert not refused.ok and any("must start with BILLINGINVOICES_" in problem for problem in refused.problems)


async def test_an_import_whose_secret_is_outside_the_adapters_namespace_sends_nothing(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reference no adapter of this import may name (``OTHER_TOKEN`` for ``billing``) is a problem before
    anything is sent, named with the namespace it must be in."""
    overlay = tmp_path / "overlay.json"
    overlay.write_text(json.dumps({"access": {"roles": ["staff"]}, "credential": {"secret_env": "OTHER_TOKEN"}}))
    status, _, err = await _cli(
        redis_url, "", capsys, "adapters", "import", str(SPEC), "--name", "billing", "--operations", "listInvoices",
        "--overlay", str(overlay), "--base-url", "http://127.0.0.1:9", "--register", "http://127.0.0.1:9",
    )  # fmt: skip
    assert status == 1
    assert "problem: credential.secret_env: OTHER_TOKEN is not in adapter billing's namespace (BILLING_...)" in err
    assert "nothing was sent" in err
