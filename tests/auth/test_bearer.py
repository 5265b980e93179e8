"""A flood of unauthenticated requests is answered 429 before any key lookup.

`BearerAuth` runs under uvicorn in front of a plain endpoint, with a real `KeyStore` on a real Redis,
subclassed only to count its lookups.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import Receive, Scope, Send

from backends.serve import serve_app_in_thread
from gateway.audit.events import ListAuditSink
from gateway.auth.bearer import BearerAuth
from gateway.limits.budgets import Budget
from gateway.limits.rate_limiter import AddressBudgets
from gateway.principal import KeyKind, Principal
from gateway.store.keys import KeyStore
from tests.support.agents import make_key

pytestmark = pytest.mark.anyio


class CountingKeyStore(KeyStore):
    """The real key store, counting how often a key is looked up."""

    lookups = 0

    async def resolve(self, token: str) -> Principal | None:
        self.lookups += 1
        return await super().resolve(token)


async def _hello(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


@pytest.fixture
def edge(redis: Redis, redis_url: str) -> Iterator[tuple[str, CountingKeyStore, ListAuditSink]]:
    """An endpoint behind `BearerAuth` that allows 3 failed authentications per address, then 1 a minute.

    Its key store has a Redis client of its own, used (and closed) only on the server's event loop."""
    client = Redis.from_url(redis_url)
    keys, audit = CountingKeyStore(client), ListAuditSink()
    floods = AddressBudgets(Budget(per_minute=1, burst=3))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await client.aclose()

    guarded = BearerAuth(_hello, keys=keys, kind=KeyKind.AGENT, audit=audit, realm="mcp", floods=floods)
    with serve_app_in_thread(Starlette(routes=[Mount("/", guarded)], lifespan=lifespan), lifespan=True) as url:
        yield url, keys, audit


async def test_a_flood_of_bad_keys_gets_429_with_retry_after_and_no_key_lookup(
    edge: tuple[str, CountingKeyStore, ListAuditSink], redis: Redis
) -> None:
    """Three bad keys are looked up and refused 401; from then on the address gets 429 with
    Retry-After without a lookup, even for a good key, and the lockout is audited once."""
    url, keys, audit = edge
    good = await make_key(redis)
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        bad = [await http.get("/", headers={"authorization": f"Bearer csk_agent_{n:043d}"}) for n in range(3)]
        assert [r.status_code for r in bad] == [401, 401, 401]
        assert keys.lookups == 3
        flood = [await http.get("/", headers={"authorization": f"Bearer csk_agent_{n:043d}"}) for n in range(50)]
        flood.append(await http.get("/", headers={"authorization": f"Bearer {good}"}))
        flood.append(await http.get("/"))
    assert {r.status_code for r in flood} == {429}
    assert all(55 < int(r.headers["retry-after"]) <= 60 for r in flood)
    error = flood[0].json()["error"]  # the agents' surface answers JSON-RPC errors
    assert (error["code"], error["data"]["code"], error["data"]["retryable"]) == (-32001, "RATE_LIMITED", True)
    assert error["message"].startswith("Too many failed authentications")
    assert keys.lookups == 3
    throttles = [e for e in audit.events if e.action == "auth.throttle"]
    assert len(throttles) == 1 and throttles[0].code == "RATE_LIMITED"
    assert throttles[0].extra["client"] == "127.0.0.1"


async def test_good_keys_spend_nothing_from_the_address_budget(
    edge: tuple[str, CountingKeyStore, ListAuditSink], redis: Redis
) -> None:
    """Successful authentications are not counted: many good calls from one address leave the
    address its whole budget of failures."""
    url, _keys, _audit = edge
    good = await make_key(redis)
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        ok = [await http.get("/", headers={"authorization": f"Bearer {good}"}) for _ in range(20)]
        missing = [await http.get("/") for _ in range(4)]
    assert {r.status_code for r in ok} == {200}
    assert [r.status_code for r in missing] == [401, 401, 401, 429]


async def test_a_blocked_address_still_admits_the_good_keys_it_admitted_before_and_no_other(
    edge: tuple[str, CountingKeyStore, ListAuditSink], redis: Redis
) -> None:
    """One broken client behind a NAT does not lock out its neighbours: a key admitted from the address
    before the lockout keeps working (and is still looked up); a key never seen there gets 429; a
    vouched-for key that is revoked is refused 401, and from then on gets 429 like any other."""
    url, keys, _audit = edge
    neighbour, stranger = await make_key(redis), await make_key(redis, subject="bob@acme.example")
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        assert (await http.get("/", headers={"authorization": f"Bearer {neighbour}"})).status_code == 200
        bad = [await http.get("/", headers={"authorization": f"Bearer csk_agent_{n:043d}"}) for n in range(5)]
        assert [r.status_code for r in bad] == [401, 401, 401, 429, 429]
        lookups = keys.lookups
        again = [await http.get("/", headers={"authorization": f"Bearer {neighbour}"}) for _ in range(3)]
        assert [r.status_code for r in again] == [200] * 3 and keys.lookups == lookups + 3
        assert (await http.get("/", headers={"authorization": f"Bearer {stranger}"})).status_code == 429
        record = await KeyStore(redis).list()
        [mine] = [r for r in record if r.subject == "alice@acme.example"]
        await KeyStore(redis).revoke(mine.key_id)
        revoked = [await http.get("/", headers={"authorization": f"Bearer {neighbour}"}) for _ in range(2)]
        assert [r.status_code for r in revoked] == [401, 429]
