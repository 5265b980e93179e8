"""The admin REST API under a real uvicorn, called with httpx, over a real Redis."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.datastructures import Secret
from starlette.routing import BaseRoute, Mount, Route

from backends.serve import serve_app_in_thread
from gateway.admin.api import PREFIX, admin_routes
from gateway.admin.passkeys import passkey_table
from gateway.approvals.service import CardService
from gateway.audit.events import AuditEvent
from gateway.cards.card import CardState
from gateway.config.org_adapters import OrgAdapters
from gateway.config.settings import Settings
from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import AddressBudgets
from gateway.passkeys.service import PasskeyService, Relying
from gateway.principal import KeyKind
from gateway.registry.api import adapter_review_table
from gateway.registry.service import RegistryService
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from gateway.store.ledger.changes import RedisCardChanges
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.store.passkeys import PasskeyStore
from gateway.store.registrations import RegistryStore
from tests.support.agents import make_key
from tests.support.cards import PROPOSAL as BASE_PROPOSAL
from tests.support.cards import flood
from tests.support.redis_server import free_port
from tests.support.services import TEST_AUDIT_SECRET

AUDIT_SECRET = TEST_AUDIT_SECRET.encode()

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", name="redis_url")
def cards_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest)."""
    return quiet_redis_url


PROPOSAL = replace(BASE_PROPOSAL, agent_text={"title": "please approve quickly"})
MISSING = "crd_3_" + "0" * 32


@dataclass
class Api:
    base: str
    switches: dict[str, bool] = field(default_factory=lambda: {"writable": True})


@pytest.fixture(scope="module")
def served(redis_url: str) -> Iterator[Api]:
    """One admin API app under uvicorn for the module, with a switch for the ledger's writability. Its change
    feed is on a Redis that is not there: the event stream cannot subscribe (`gateway.admin.events`)."""
    client = Redis.from_url(redis_url)
    nowhere = Redis.from_url(f"redis://127.0.0.1:{free_port()}")
    api = Api(base="")

    async def writable() -> bool:
        return api.switches["writable"]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()  # in the server's own loop, where its connections live
        await nowhere.aclose()

    async def no_refresh() -> bool:
        return False

    audit = RedisStreamAuditSink(client, secret=AUDIT_SECRET)
    service = CardService(RedisLedger(client), audit, writable=writable, changes=RedisCardChanges(nowhere))
    orgs = OrgAdapters({"acme": frozenset({"expenses"})})
    registry = RegistryService(RegistryStore(client), audit, allowed_base_urls=(), served_tool_names=frozenset,
                               refresh=no_refresh, lease_seconds=30.0, org_adapters=orgs)  # fmt: skip
    review = adapter_review_table(registry, audit=audit)
    relying = Relying(rp_id="127.0.0.1", origin="http://127.0.0.1:8765")
    passkeys = PasskeyService(PasskeyStore(client), audit, relying=relying, keys_may_register=True, now_ms=lambda: 1)
    tables = [review, passkey_table(passkeys, mount=PREFIX, audit=audit)]
    routes = admin_routes(
        service, keys=KeyStore(client), audit=audit, tables=tables, floods=AddressBudgets(Limits().unauthenticated)
    )
    app = Starlette(routes=routes, lifespan=lifespan)
    with serve_app_in_thread(app, lifespan=True) as base:
        api.base = base
        yield api


@pytest.fixture
async def api(served: Api, redis: Redis) -> AsyncIterator[Api]:
    served.switches["writable"] = True
    yield served
    served.switches["writable"] = True


async def propose(redis: Redis, **changes: Any) -> str:
    created = await RedisLedger(redis).propose(replace(PROPOSAL, **{"dedupe_key": str(changes), **changes}))
    assert created.card is not None
    return created.card.card_id


async def admin_key(redis: Redis, subject: str = "bob@acme.example", **kwargs: Any) -> str:
    kwargs.setdefault("roles", ("approver",))
    return await make_key(redis, subject=subject, kind=KeyKind.ADMIN, **kwargs)


@contextlib.asynccontextmanager
async def client(api: Api, token: str | None) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=f"{api.base}/admin/api", headers=headers, timeout=5) as http:
        yield http


async def card_audit(redis: Redis) -> list[AuditEvent]:
    return [e for e in await RedisStreamAuditSink(redis).recent(100) if e.action.startswith("card.")]


async def test_list_and_show_see_only_the_admins_org(api: Api, redis: Redis) -> None:
    """Another org's card is absent from the list and answers 404 with the body of a nonexistent id."""
    mine = await propose(redis)
    theirs = await propose(redis, requester_org="globex", requester_subject="gus@globex.example")
    async with client(api, await admin_key(redis)) as http:
        listed = (await http.get("/cards")).json()["cards"]
        assert [c["card_id"] for c in listed] == [mine]
        shown = await http.get(f"/cards/{mine}")
        assert shown.status_code == 200 and shown.json()["card"]["agent_text"]["untrusted"] is True
        assert shown.headers["cache-control"] == "no-store"
        foreign, missing, malformed = [await http.get(f"/cards/{card_id}") for card_id in (theirs, MISSING, "x")]
    assert foreign.status_code == missing.status_code == malformed.status_code == 404
    assert foreign.content == missing.content == malformed.content
    assert foreign.json() == {"error": {"code": "NOT_FOUND", "message": "no such card"}}


async def test_list_filters_and_refuses_unknown_parameters(api: Api, redis: Redis) -> None:
    """state, tool and requester filter; a misspelt filter is a 422, not a silently unfiltered list."""
    first = await propose(redis)
    second = await propose(redis, tool="orders_refund")
    async with client(api, await admin_key(redis)) as http:
        by_tool = (await http.get("/cards", params={"tool": "orders_refund"})).json()["cards"]
        assert (await http.post(f"/cards/{first}/cancel")).status_code == 200
        by_state = (await http.get("/cards", params={"state": "CANCELLED"})).json()["cards"]
    assert [c["card_id"] for c in by_tool] == [second]
    assert [c["card_id"] for c in by_state] == [first]
    async with client(api, await admin_key(redis)) as http:
        typo = await http.get("/cards", params={"status": "PENDING"})
        bad_state = await http.get("/cards", params={"state": "DONE"})
    assert typo.status_code == bad_state.status_code == 422
    assert typo.json()["error"]["problems"][0].startswith("status:")


async def follow(http: httpx.AsyncClient, params: dict[str, str], *, pages: int = 200) -> list[dict[str, Any]]:
    """Every card of a listing, following `next_cursor` until it is null (at most `pages` pages)."""
    cards: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(pages):
        answer = await http.get("/cards", params={**params, **({"cursor": cursor} if cursor else {})})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        cards += body["cards"]
        cursor = body["next_cursor"]
        if cursor is None:
            return cards
    raise AssertionError(f"still a next_cursor after {pages} pages")


async def test_an_old_pending_card_behind_a_flood_of_newer_ones_is_found_by_following_cursors(
    api: Api, redis: Redis
) -> None:
    """Over a thousand newer cards hide nothing: the cursors reach the oldest PENDING card, each card once,
    newest first; a filter (tool) searches every card of the org, not the newest thousand."""
    old = await propose(redis, tool="orders_refund")
    newer = await flood(redis, 1_100)
    async with client(api, await admin_key(redis)) as http:
        pending = await follow(http, {"state": "PENDING", "limit": "200"})
        refunds = await follow(http, {"tool": "orders_refund", "limit": "10"})
    ids = [card["card_id"] for card in pending]
    assert len(ids) == len(set(ids)) == 1_101 and set(ids) == {old, *newer} and ids[-1] == old
    created = [card["created_at"] for card in pending]
    assert created == sorted(created, reverse=True)
    assert [card["card_id"] for card in refunds] == [old]


async def test_a_cursor_the_list_did_not_issue_is_refused_and_audited(api: Api, redis: Redis) -> None:
    """A forged or mangled cursor is a 422, audited, never a silently restarted list."""
    await propose(redis)
    async with client(api, await admin_key(redis)) as http:
        answers = [await http.get("/cards", params={"cursor": cursor}) for cursor in ("nonsense", "e30", "W10")]
    assert [answer.status_code for answer in answers] == [422, 422, 422]
    assert {answer.json()["error"]["problems"][0].split(":")[0] for answer in answers} == {"cursor"}
    refusals = [e for e in await card_audit(redis) if e.action == "card.list"]
    assert [(e.outcome, e.code) for e in refusals] == [("deny", "VALIDATION_ERROR")] * 3


async def test_approve_flips_the_card_to_approved_and_is_audited(api: Api, redis: Redis) -> None:
    """A matching version and args_hash approve; the answer carries the new card; the audit has it."""
    card_id = await propose(redis)
    async with client(api, await admin_key(redis)) as http:
        answer = await http.post(f"/cards/{card_id}/approve", json={"version": 1, "args_hash": "h1", "comment": "ok"})
    assert answer.status_code == 200
    body = answer.json()
    assert body["code"] == "OK" and body["card"]["state"] == "APPROVED" and body["card"]["decision"] == "approved"
    assert body["card"]["approvals"]["by"] == ["bob@acme.example"]
    [event] = await card_audit(redis)
    assert (event.action, event.outcome, event.subject, event.org, event.extra["card_id"]) == (
        "card.approve", "ok", "bob@acme.example", "acme", card_id,
    )  # fmt: skip


async def test_self_approval_and_missing_role_are_403(api: Api, redis: Redis) -> None:
    """The requester cannot approve its own card; an admin without the approver role cannot decide."""
    card_id = await propose(redis)
    body = {"version": 1, "args_hash": "h1"}
    async with client(api, await admin_key(redis, "alice@acme.example")) as http:
        own = await http.post(f"/cards/{card_id}/approve", json=body)
    async with client(api, await admin_key(redis, "vic@acme.example", roles=("staff",))) as http:
        no_role = await http.post(f"/cards/{card_id}/approve", json=body)
        readable = await http.get(f"/cards/{card_id}")
    assert own.status_code == no_role.status_code == 403
    assert own.json()["error"]["code"] == no_role.json()["error"]["code"] == "PERMISSION_DENIED"
    assert readable.status_code == 200
    assert [(e.outcome, e.code) for e in await card_audit(redis)] == [("deny", "PERMISSION_DENIED")] * 2


async def test_stale_version_is_409_with_the_current_card(api: Api, redis: Redis) -> None:
    """An approval for a version the card has moved past conflicts, and shows the card as it is now."""
    card_id = await propose(redis, approvals_required=2)
    async with client(api, await admin_key(redis)) as http:
        assert (await http.post(f"/cards/{card_id}/approve", json={"version": 1, "args_hash": "h1"})).status_code == 200
    async with client(api, await admin_key(redis, "carol@acme.example")) as http:
        stale = await http.post(f"/cards/{card_id}/approve", json={"version": 1, "args_hash": "h1"})
        wrong_hash = await http.post(f"/cards/{card_id}/approve", json={"version": 2, "args_hash": "h0"})
    for answer in (stale, wrong_hash):
        assert answer.status_code == 409 and answer.json()["error"]["code"] == "CONFLICT"
        assert (answer.json()["card"]["state"], answer.json()["card"]["version"]) == ("PENDING", 2)


async def test_quorum_of_two_distinct_admins(api: Api, redis: Redis) -> None:
    """With two approvals required, the same admin twice is 409; a second admin approves."""
    card_id = await propose(redis, approvals_required=2)
    bob, carol = await admin_key(redis), await admin_key(redis, "carol@acme.example")
    async with client(api, bob) as http:
        first = await http.post(f"/cards/{card_id}/approve", json={"version": 1, "args_hash": "h1"})
        again = await http.post(f"/cards/{card_id}/approve", json={"version": 2, "args_hash": "h1"})
    assert first.status_code == 200 and first.json()["card"]["approvals"]["received"] == 1
    assert first.json()["card"]["state"] == "PENDING"
    assert again.status_code == 409 and again.json()["card"]["approvals"]["by"] == ["bob@acme.example"]
    async with client(api, carol) as http:
        second = await http.post(f"/cards/{card_id}/approve", json={"version": 2, "args_hash": "h1"})
    assert second.status_code == 200 and second.json()["card"]["state"] == "APPROVED"


async def test_reject_requires_a_reason_and_vetoes(api: Api, redis: Redis) -> None:
    """No reason or a blank one is 422 and changes nothing; a reason rejects; approving after is 409."""
    card_id = await propose(redis)
    async with client(api, await admin_key(redis)) as http:
        missing = await http.post(f"/cards/{card_id}/reject", json={})
        blank = await http.post(f"/cards/{card_id}/reject", json={"reason": "  "})
        assert (await http.get(f"/cards/{card_id}")).json()["card"]["version"] == 1
        vetoed = await http.post(f"/cards/{card_id}/reject", json={"reason": "over budget"})
        late = await http.post(f"/cards/{card_id}/approve", json={"version": 2, "args_hash": "h1"})
    assert missing.status_code == blank.status_code == 422
    assert missing.json()["error"]["problems"] == ["reason: Field required"]
    assert vetoed.status_code == 200
    assert vetoed.json()["card"]["rejection"] == {"by": "bob@acme.example", "reason": "over budget"}
    assert late.status_code == 409 and late.json()["card"]["state"] == "REJECTED"


async def test_bodies_are_strict_json(api: Api, redis: Redis) -> None:
    """Unknown fields, a version sent as a string, and non-JSON bodies are 422 with the problems listed."""
    card_id = await propose(redis)
    async with client(api, await admin_key(redis)) as http:
        extra = await http.post(f"/cards/{card_id}/approve", json={"version": 1, "args_hash": "h1", "force": True})
        as_text = await http.post(f"/cards/{card_id}/approve", json={"version": "1", "args_hash": "h1"})
        not_json = await http.post(f"/cards/{card_id}/approve", content=b"version=1")
        cancel_extra = await http.post(f"/cards/{card_id}/cancel", json={"why": "x"})
    for answer in (extra, as_text, not_json, cancel_extra):
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "VALIDATION_ERROR"
    assert extra.json()["error"]["problems"][0].startswith("force:")
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.PENDING


async def test_cancel(api: Api, redis: Redis) -> None:
    """A pending card is cancelled with an empty body; cancelling again is 409."""
    card_id = await propose(redis)
    async with client(api, await admin_key(redis)) as http:
        done = await http.post(f"/cards/{card_id}/cancel")
        again = await http.post(f"/cards/{card_id}/cancel")
    assert done.status_code == 200 and done.json()["card"]["decision"] == "cancelled"
    assert again.status_code == 409 and again.json()["card"]["state"] == "CANCELLED"


async def test_resolve_only_from_needs_reconciliation(api: Api, redis: Redis) -> None:
    """A pending card cannot be resolved (409); a NEEDS_RECONCILIATION one can, with evidence."""
    ledger = RedisLedger(redis)
    pending = await propose(redis)
    stuck = await propose(redis, dedupe_key="stuck")
    assert (await ledger.approve(stuck, approver="carol@acme.example", version=1, args_hash="h1", comment="")).ok
    claim = await ledger.claim(stuck, worker="w1", lease_ms=5000)
    assert claim.card is not None and (await ledger.dispatch(stuck, fence=claim.card.fence)).ok
    assert (await ledger.complete(stuck, fence=claim.card.fence, outcome=CardState.UNKNOWN, reference="",
                                  evidence={}, settle_ms=60_000)).ok  # fmt: skip
    assert (await ledger.reconcile(stuck, result="NEEDS_RECONCILIATION", reference="", evidence={})).ok
    evidence = {"checked": "orders console", "order": "ord-1001"}
    async with client(api, await admin_key(redis)) as http:
        wrong_state = await http.post(f"/cards/{pending}/resolve", json={"outcome": "FAILED", "evidence": evidence})
        no_evidence = await http.post(f"/cards/{stuck}/resolve", json={"outcome": "FAILED", "evidence": {}})
        bad_outcome = await http.post(f"/cards/{stuck}/resolve", json={"outcome": "DONE", "evidence": evidence})
        done = await http.post(f"/cards/{stuck}/resolve", json={"outcome": "FAILED", "evidence": evidence})
    assert wrong_state.status_code == 409 and wrong_state.json()["card"]["state"] == "PENDING"
    assert no_evidence.status_code == bad_outcome.status_code == 422
    assert done.status_code == 200
    assert (done.json()["card"]["state"], done.json()["card"]["evidence"]) == ("FAILED", evidence)


async def test_agent_key_missing_key_and_revoked_key_get_401(api: Api, redis: Redis) -> None:
    """Only a live admin key opens the admin API; the bad keys are audited."""
    card_id = await propose(redis)
    agent = await make_key(redis, subject="bob@acme.example", roles=("approver",))
    for token in (agent, None, "csk_admin_nope"):
        async with client(api, token) as http:
            listed = await http.get("/cards")
            approve = await http.post(f"/cards/{card_id}/approve", json={"version": 1, "args_hash": "h1"})
            spec = await http.get("/openapi.json")
        assert listed.status_code == approve.status_code == spec.status_code == 401
        assert approve.headers["www-authenticate"].startswith('Bearer realm="admin"')
    rejected = [e for e in await RedisStreamAuditSink(redis).recent(50) if e.action == "auth.reject"]
    assert len(rejected) == 6  # the agent key and the unknown key, three requests each; no key is not audited
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.PENDING


async def test_not_writable_ledger_is_503_and_nothing_changes(api: Api, redis: Redis) -> None:
    """Fail closed: every decision is 503 and audited as a refusal; reading still works."""
    card_id = await propose(redis)
    api.switches["writable"] = False
    async with client(api, await admin_key(redis)) as http:
        answers = [
            await http.post(f"/cards/{card_id}/approve", json={"version": 1, "args_hash": "h1"}),
            await http.post(f"/cards/{card_id}/reject", json={"reason": "no"}),
            await http.post(f"/cards/{card_id}/cancel"),
        ]
        shown = await http.get(f"/cards/{card_id}")
    assert [a.status_code for a in answers] == [503] * 3
    assert {a.json()["error"]["code"] for a in answers} == {"LEDGER_UNAVAILABLE"}
    assert {a.headers.get("retry-after") for a in answers} == {"1"}  # a retryable refusal says when
    assert shown.status_code == 200 and (shown.json()["card"]["state"], shown.json()["card"]["version"]) == (
        "PENDING", 1,
    )  # fmt: skip
    assert [(e.action, e.code) for e in await card_audit(redis)] == [
        ("card.approve", "LEDGER_UNAVAILABLE"),
        ("card.reject", "LEDGER_UNAVAILABLE"),
        ("card.cancel", "LEDGER_UNAVAILABLE"),
    ]


async def test_openapi_document_describes_the_routes(api: Api, redis: Redis) -> None:
    """openapi.json is OpenAPI 3.1 with every route, the bearer scheme, and a card schema matching real cards."""
    card_id = await propose(redis)
    async with client(api, await admin_key(redis)) as http:
        spec = (await http.get("/openapi.json")).json()
        card = (await http.get(f"/cards/{card_id}")).json()["card"]
    assert spec["openapi"].startswith("3.1") and spec["servers"] == [{"url": "/admin/api"}]
    assert set(spec["paths"]) == {
        "/cards", "/cards/events", "/cards/decisions", "/cards/{card_id}", "/cards/{card_id}/approve",
        "/cards/{card_id}/reject",
        "/cards/{card_id}/cancel", "/cards/{card_id}/resolve", "/openapi.json",
        "/adapters/", "/adapters/{name}", "/adapters/{name}/accept", "/overview",
        "/passkeys", "/passkeys/registration", "/passkeys/{credential_id}", "/passkeys/challenge",
    }  # fmt: skip
    assert spec["components"]["securitySchemes"]["adminKey"] == {
        "type": "http", "scheme": "bearer", "description": "an admin key (csk_admin_...)",
    }  # fmt: skip
    approve_body = spec["components"]["schemas"]["ApproveBody"]
    assert approve_body["additionalProperties"] is False and set(approve_body["required"]) == {"version", "args_hash"}
    assert set(spec["components"]["schemas"]["AdminCard"]["required"]) == set(card)
    listing = spec["paths"]["/cards"]["get"]
    assert [p["name"] for p in listing["parameters"]] == ["state", "tool", "requester", "limit", "cursor"]
    assert spec["components"]["schemas"]["CardList"]["required"] == ["cards", "next_cursor"]
    assert set(listing["responses"]) == {"200", "401", "422", "429", "503"}


def _walk(routes: Sequence[BaseRoute], prefix: str = "") -> set[tuple[str, str]]:
    """(method, path) of every route served, through Mounts and the middleware around their apps."""
    found: set[tuple[str, str]] = set()
    for route in routes:
        if isinstance(route, Mount):
            app = route.app
            while not hasattr(app, "routes") and hasattr(app, "app"):  # BearerAuth and the like
                app = app.app
            inner = getattr(app, "routes", None)
            # A mount that cannot be walked serves paths nobody can list: count it as an undocumented route.
            found |= _walk(inner, prefix + route.path) if inner else {("ANY", f"{prefix}{route.path}/{{path}}")}
        elif isinstance(route, Route):
            found |= {(method, prefix + route.path) for method in route.methods or {"ANY"} if method != "HEAD"}
    return found


async def test_the_document_lists_exactly_the_routes_the_gateway_serves_under_admin_api(
    redis: Redis, redis_url: str
) -> None:
    """Every method and path the composed gateway answers under /admin/api has a row in openapi.json, and no more."""
    app = create_app(Settings(redis_url=redis_url, adapters={}, audit_secret=Secret(TEST_AUDIT_SECRET)), tools=[])
    try:
        transport = httpx.ASGITransport(app=app)
        headers = {"authorization": f"Bearer {await admin_key(redis)}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers) as http:
            spec = (await http.get("/admin/api/openapi.json")).json()
    finally:
        await app.state.gateway.aclose()
    server = spec["servers"][0]["url"]
    documented = {(method.upper(), server + path) for path, item in spec["paths"].items() for method in item}
    served = {(method, path) for method, path in _walk(app.routes) if path.startswith(f"{server}/")}
    assert {("GET", "/admin/api/cards"), ("POST", "/admin/api/adapters/{name}/accept")} <= served
    assert served == documented


def _operation(spec: dict[str, Any], request: httpx.Request) -> dict[str, Any]:
    path = request.url.path.removeprefix(spec["servers"][0]["url"])
    for template, item in spec["paths"].items():
        pattern = re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path) and request.method.lower() in item:
            return dict(item[request.method.lower()])
    raise AssertionError(f"{request.method} {path} is not documented")


async def test_every_answer_validates_against_the_schema_its_route_documents(api: Api, redis: Redis) -> None:
    """Successes and refusals of each route, cards and adapters, match the served document's schema for their status."""
    card_id, contested = await propose(redis), await propose(redis, approvals_required=2)
    store = RegistryStore(redis)
    manifest = {"base_url": "http://127.0.0.1:9", "signing_secret_env": "EXPENSES_SIGNING_KEY",
                "tools": [{"name": "expenses_list", "description": "List."}]}  # fmt: skip
    flag = {"code": "instruction_to_model", "field": "tools[0].description", "excerpt": "ignore previous"}
    registration = await store.propose("expenses", manifest, owner="expenses-svc", flags=[flag])
    answers: list[httpx.Response] = []
    async with client(api, await admin_key(redis, roles=("approver", "registry"))) as http:
        spec = (await http.get("/openapi.json")).json()
        answers += [
            await http.get("/cards"),
            await http.get("/cards", params={"state": "DONE"}),
            await http.get(f"/cards/{card_id}"),
            await http.get(f"/cards/{MISSING}"),
            await http.post(f"/cards/{card_id}/approve", json={"version": 1, "args_hash": "h1", "comment": "ok"}),
            await http.post(f"/cards/{card_id}/approve", json={"version": 1, "args_hash": "h1"}),
            await http.post(f"/cards/{card_id}/reject", json={}),
            await http.post(f"/cards/{card_id}/resolve", json={"outcome": "FAILED", "evidence": {"checked": "x"}}),
            await http.post(f"/cards/{contested}/cancel"),
            await http.get("/adapters/"),
            await http.get("/overview", params={"window": "7d"}),
            await http.get("/overview", params={"window": "1y"}),
            await http.get("/adapters/expenses"),
            await http.get("/adapters/nothing"),
            await http.post("/adapters/expenses/accept", json={"hash": "sha256:old"}),
            await http.post("/adapters/expenses/accept", json={"hash": registration.proposed_hash}),
            await http.delete("/adapters/expenses"),
            await http.delete("/adapters/expenses"),
        ]
    async with client(api, await admin_key(redis, "alice@acme.example")) as http:
        own = await propose(redis, dedupe_key="own")
        answers += [await http.post(f"/cards/{own}/approve", json={"version": 1, "args_hash": "h1"})]
        answers += [await http.get("/adapters/")]  # an approver without the registry role
    api.switches["writable"] = False
    async with client(api, await admin_key(redis)) as http:
        answers += [await http.post(f"/cards/{own}/cancel")]
    async with client(api, None) as http:
        answers += [await http.get("/cards"), await http.get("/adapters/")]
    for answer in answers:
        documented = _operation(spec, answer.request)["responses"].get(str(answer.status_code))
        assert documented is not None, f"{answer.request.method} {answer.request.url.path} -> {answer.status_code}"
        schema = documented["content"]["application/json"]["schema"]
        Draft202012Validator({**schema, "components": spec["components"]}).validate(answer.json())
    assert {answer.status_code for answer in answers} == {200, 401, 403, 404, 409, 422, 503}
    assert answers[9].json()["adapters"][0]["flags"] == [flag] and answers[14].json()["adapter"]["name"] == "expenses"
    assert len(answers[10].json()["cards_per_hour"]) == 168 and answers[11].status_code == 422


async def test_unknown_routes_and_methods_answer_json(api: Api, redis: Redis) -> None:
    """JSON only, even for a wrong path or method."""
    async with client(api, await admin_key(redis)) as http:
        nowhere = await http.get("/nowhere")
        wrong_method = await http.delete(f"/cards/{MISSING}")
    assert nowhere.status_code == 404 and nowhere.json()["error"]["code"] == "NOT_FOUND"
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "METHOD_NOT_ALLOWED"


async def test_malformed_requests_are_refused_and_audited(api: Api, redis: Redis) -> None:
    """A body or query refused before the card service (or the passkey service) is still an audited refusal,
    and changes nothing."""
    card_id = await propose(redis)
    async with client(api, await admin_key(redis)) as http:
        bad_body = await http.post(f"/cards/{card_id}/approve", content=b"not json")
        bad_query = await http.get("/cards", params={"status": "PENDING"})
        bad_passkey = await http.post("/passkeys/challenge", json={"card_id": card_id, "version": 0})
    assert bad_body.status_code == bad_query.status_code == bad_passkey.status_code == 422
    assert bad_passkey.json()["error"]["code"] == "VALIDATION_ERROR" and bad_passkey.json()["error"]["problems"]
    refusals = [e for e in await RedisStreamAuditSink(redis).recent(20) if e.action == "admin.request"]
    assert [(e.outcome, e.code) for e in refusals] == [("deny", "VALIDATION_ERROR")] * 3
    assert refusals[-1].extra["path"] == "/admin/api/passkeys/challenge"
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state.value == "PENDING"


async def test_the_event_stream_of_a_service_whose_change_feed_cannot_subscribe_answers_503_so_clients_poll(
    api: Api, redis: Redis
) -> None:
    """A gateway whose change feed cannot be subscribed to says so (503, JSON) instead of a silent stream."""
    async with client(api, await admin_key(redis)) as http:
        answer = await http.get("/cards/events")
    assert answer.status_code == 503 and answer.headers["content-type"].startswith("application/json")
    assert answer.json()["error"]["code"] == "LEDGER_UNAVAILABLE"
