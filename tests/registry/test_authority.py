"""Who may review, accept and remove a registered adapter, and who owns its name: through a real gateway.

The gateway here is configured with two orgs: acme serves the adapter ``expenses``, globex does not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from redis.asyncio import Redis
from starlette.datastructures import Secret

from backends.expenses import expenses_manifest
from backends.serve import serve_app_in_thread
from gateway.canonical import canonical_json
from gateway.config.settings import OrgSettings, Settings
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.registrations import RegistryStore, manifest_hash
from tests.support.agents import make_key
from tests.support.services import TEST_AUDIT_SECRET

AUDIT = Secret(TEST_AUDIT_SECRET)

pytestmark = pytest.mark.anyio

ROLES = frozenset({"staff", "approver", "registry", "registry-operator"})
ORGS = (
    OrgSettings(name="acme", adapters=frozenset({"expenses"}), roles=ROLES),
    OrgSettings(name="globex", adapters=frozenset({"rooms"}), roles=ROLES),
)
MANIFEST = expenses_manifest("http://127.0.0.1:9")  # never called: nothing here runs a tool


@pytest.fixture(scope="module", name="redis_url")
def registry_database(quiet_redis_url: str) -> str:
    """A database of its own: this module's gateway is not the session's."""
    return quiet_redis_url


@pytest.fixture(scope="module")
def base(redis_url: str) -> Iterator[str]:
    """A gateway under uvicorn whose orgs are `ORGS`."""
    settings = Settings(
        redis_url=redis_url, adapters={}, orgs=ORGS, run_worker=False, registry_poll_seconds=0.2, audit_secret=AUDIT
    )
    with serve_app_in_thread(create_app(settings, tools=[]), lifespan=True) as url:
        yield url


async def _register(base: str, key: str, name: str = "expenses", manifest: Any = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.put(f"{base}/registry/api/adapters/{name}", json=manifest or MANIFEST,
                              headers={"authorization": f"Bearer {key}"})  # fmt: skip


async def _admin(base: str, key: str, method: str, path: str, body: Any = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.request(method, f"{base}/admin/api/adapters{path}", json=body,
                                  headers={"authorization": f"Bearer {key}"})  # fmt: skip


async def _service(redis: Redis, subject: str = "expenses-svc") -> str:
    return await make_key(redis, kind=KeyKind.SERVICE, subject=subject, org="acme", roles=())


async def _admin_key(redis: Redis, org: str, *roles: str) -> str:
    return await make_key(redis, kind=KeyKind.ADMIN, subject=f"root@{org}.example", org=org, roles=roles)


async def _denials(redis: Redis) -> list[tuple[str, str, str]]:
    events = await RedisStreamAuditSink(redis).recent(100)
    return [(e.action, e.code, e.extra.get("adapter", "")) for e in events if e.outcome == "deny"]


async def test_an_admin_of_an_org_the_adapter_does_not_serve_can_neither_accept_nor_remove_it(
    base: str, redis: Redis
) -> None:
    """globex's registry admin is refused (403, audited PERMISSION_DENIED) and nothing changes; the answer
    for a registered adapter is the same as for a name nobody registered, so it tells nothing."""
    registered = await _register(base, await _service(redis))
    assert registered.status_code == 202, registered.text
    proposed = registered.json()["adapter"]["proposed_hash"]
    outsider = await _admin_key(redis, "globex", "registry")
    accept = await _admin(base, outsider, "POST", "/expenses/accept", {"hash": proposed})
    remove = await _admin(base, outsider, "DELETE", "/expenses")
    show = await _admin(base, outsider, "GET", "/expenses")
    unknown = await _admin(base, outsider, "POST", "/billing/accept", {"hash": proposed})
    assert [r.status_code for r in (accept, remove, show, unknown)] == [403, 403, 403, 403]
    assert accept.json()["error"]["code"] == "PERMISSION_DENIED"
    assert accept.json()["error"]["message"] == unknown.json()["error"]["message"].replace("billing", "expenses")
    assert "adapter" not in accept.json() and "adapter" not in show.json()
    assert (await _admin(base, outsider, "GET", "/")).json() == {"adapters": []}
    registration = await RegistryStore(redis).get("expenses")
    assert registration is not None and registration.state == "new" and registration.accepted_by is None
    assert {("registry.accept", "PERMISSION_DENIED", "expenses"), ("registry.remove", "PERMISSION_DENIED", "expenses"),
            ("registry.show", "PERMISSION_DENIED", "expenses")} <= set(await _denials(redis))  # fmt: skip

    insider = await _admin_key(redis, "acme", "registry")
    assert [a["name"] for a in (await _admin(base, insider, "GET", "/")).json()["adapters"]] == ["expenses"]
    assert (await _admin(base, insider, "POST", "/expenses/accept", {"hash": proposed})).status_code == 200
    assert (await _admin(base, insider, "DELETE", "/expenses")).status_code == 200


async def test_the_registry_operator_role_accepts_and_removes_any_adapter(base: str, redis: Redis) -> None:
    """An admin with registry-operator reviews, accepts and removes an adapter no org of theirs serves."""
    registered = await _register(base, await _service(redis))
    operator = await _admin_key(redis, "globex", "registry-operator")
    assert [a["name"] for a in (await _admin(base, operator, "GET", "/")).json()["adapters"]] == ["expenses"]
    accepted = await _admin(
        base, operator, "POST", "/expenses/accept", {"hash": registered.json()["adapter"]["proposed_hash"]}
    )
    assert accepted.status_code == 200 and accepted.json()["adapter"]["accepted_by"] == "root@globex.example"
    assert (await _admin(base, operator, "DELETE", "/expenses")).status_code == 200
    assert await RegistryStore(redis).get("expenses") is None


async def test_concurrent_registrations_of_a_new_name_leave_exactly_one_owner(base: str, redis: Redis) -> None:
    """Eight services register the same new name at once: one owns it (202), seven are refused (403, audited),
    and the stored proposal is the winner's."""
    keys = {f"svc{i}": await _service(redis, f"svc{i}") for i in range(8)}
    answers: dict[str, httpx.Response] = {}
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for subject, key in keys.items():
            headers = {"authorization": f"Bearer {key}"}
            clients[subject] = await stack.enter_async_context(httpx.AsyncClient(base_url=base, headers=headers))

        async def warm(http: httpx.AsyncClient) -> None:
            assert (await http.get("/registry/api/adapters/expenses")).status_code == 404  # the name is free

        # At once, so every client holds an open connection and the gateway's Redis pool one per request.
        async with anyio.create_task_group() as group:
            for http in clients.values():
                group.start_soon(warm, http)
        ready = anyio.Event()

        async def register(subject: str) -> None:
            await ready.wait()  # every request leaves at once, on connections already open
            answers[subject] = await clients[subject].put("/registry/api/adapters/expenses", json=MANIFEST)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for subject in keys:
                    group.start_soon(register, subject)
                ready.set()
    codes = sorted(answer.status_code for answer in answers.values())
    assert codes == [202] + [403] * 7, codes
    [winner] = [subject for subject, answer in answers.items() if answer.status_code == 202]
    registration = await RegistryStore(redis).get("expenses")
    assert registration is not None and registration.owner == winner
    assert answers[winner].json()["adapter"]["owner"] == winner
    assert [d for d in await _denials(redis) if d[0] == "registry.register"] == [
        ("registry.register", "PERMISSION_DENIED", "expenses")
    ] * 7


async def test_a_name_registered_before_names_were_claimed_keeps_its_owner(redis: Redis) -> None:
    """A registration stored by an earlier version (its owner only inside the record) is claimed for that
    owner on the next registration: another service is refused, the owner goes on."""
    legacy = {"manifest": MANIFEST, "hash": manifest_hash(MANIFEST), "owner": "expenses-svc", "flags": []}
    await redis.set("countersign:registry:{expenses}:proposed", canonical_json(legacy))
    await redis.sadd("countersign:registry:names", "expenses")
    store = RegistryStore(redis)
    assert await store.propose("expenses", MANIFEST, owner="mallory-svc", flags=[]) is None
    again = await store.propose("expenses", MANIFEST, owner="expenses-svc", flags=[])
    assert again is not None and again.owner == "expenses-svc"
    assert await redis.get("countersign:registry:{expenses}:owner") == b"expenses-svc"
