"""The expenses service over real HTTP: org scoping, idempotent submit and withdraw, and its own manifest.

The service shell (auth, identity, faults, request log) is shared with rooms and orders and tested there;
here it is checked only as far as the expenses routes rely on it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest

from backends.expenses import HOSTILE_EXPENSE_NOTE, ExpensesService, create_expenses_app, expenses_manifest
from gateway.registry.manifest import AdapterManifest, review_manifest
from gateway.registry.schema import output_model
from policies.manifest_safety import check_base_url
from tests.support.services import TEST_SIGNING_KEY, signed_identity

if TYPE_CHECKING:
    from conftest import AppHost, FakeClock

pytestmark = pytest.mark.anyio

TOKEN = "expenses-test-token"
ALICE = signed_identity("alice@acme.example", "acme", audience="expenses", key=TEST_SIGNING_KEY)
BOB = signed_identity("bob@acme.example", "acme", audience="expenses", key=TEST_SIGNING_KEY)
HANK = signed_identity("hank@globex.example", "globex", audience="expenses", key=TEST_SIGNING_KEY)
TAXI = {"title": "Taxi to the client", "amount_cents": 3_400, "currency": "EUR"}


def key(value: str) -> dict[str, str]:
    return {"Idempotency-Key": value}


@dataclass(frozen=True, kw_only=True, slots=True)
class Expenses:
    service: ExpensesService
    client: httpx.AsyncClient
    """Talks to the app with the service token set, and no identity headers."""
    url: str


@pytest.fixture
async def expenses(app_host: AppHost, clock: FakeClock) -> AsyncIterator[Expenses]:
    """A fresh expenses service with the demo data, on the session's uvicorn."""
    app = create_expenses_app(service_token=TOKEN, signing_key=TEST_SIGNING_KEY, key_ttl_seconds=60.0, clock=clock)
    with app_host.hosting(app):
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=app_host.url, headers=headers, timeout=5.0) as client:
            yield Expenses(service=app.state.service, client=client, url=app_host.url)


async def test_request_without_the_service_token_is_refused_401(expenses: Expenses) -> None:
    """Expenses sits behind the same bearer check as the other services."""
    async with httpx.AsyncClient(base_url=expenses.url) as anonymous:
        response = await anonymous.get("/reports", headers=ALICE)
    assert (response.status_code, response.json()) == (401, {"error": "unauthorized"})


async def test_request_without_caller_identity_is_refused_400(expenses: Expenses) -> None:
    """Reports are per org, so a request that names no caller reaches no route."""
    response = await expenses.client.get("/reports")
    assert (response.status_code, response.json()) == (400, {"error": "missing_identity"})


@pytest.mark.parametrize(
    ("caller", "status", "report_ids"),
    [
        (ALICE, None, ["exp-2001", "exp-2002", "exp-2003", "exp-2004"]),
        (BOB, None, ["exp-2001", "exp-2002", "exp-2003", "exp-2004"]),
        (HANK, None, ["exp-2005", "exp-2006"]),
        (ALICE, "submitted", ["exp-2001"]),
        (ALICE, "paid", ["exp-2004"]),
        (HANK, "draft", []),
    ],
)
async def test_list_shows_the_callers_org_only_optionally_by_status(
    expenses: Expenses, caller: dict[str, str], status: str | None, report_ids: list[str]
) -> None:
    """Everyone in an org sees all of its reports and none of another org's."""
    params = {} if status is None else {"status": status}
    response = await expenses.client.get("/reports", params=params, headers=caller)
    assert [report["report_id"] for report in response.json()["reports"]] == report_ids


async def test_an_unknown_status_filter_is_refused_400(expenses: Expenses) -> None:
    """A status outside the four is a malformed request, not an empty list."""
    response = await expenses.client.get("/reports", params={"status": "rejected"}, headers=ALICE)
    assert (response.status_code, response.json()) == (400, {"error": "invalid_status"})


async def test_a_colleagues_report_is_shown_with_its_hostile_note_verbatim(expenses: Expenses) -> None:
    """The backend does not sanitise free text; the manifest marks it untrusted for the gateway to withhold."""
    response = await expenses.client.get("/reports/exp-2002", headers=ALICE)
    assert response.json() == {
        "report_id": "exp-2002",
        "org": "acme",
        "submitted_by": "bob@acme.example",
        "mine": False,
        "title": "Team lunch after the release",
        "amount_cents": 12_400,
        "currency": "USD",
        "status": "approved",
        "note": HOSTILE_EXPENSE_NOTE,
    }


@pytest.mark.parametrize(("method", "path"), [("GET", "/reports/{id}"), ("POST", "/reports/{id}/withdraw")])
async def test_another_orgs_report_answers_exactly_like_a_missing_one(
    expenses: Expenses, method: str, path: str
) -> None:
    """For acme, globex's ``exp-2005`` is byte-for-byte ``exp-9999``, and withdrawing it changes nothing."""
    theirs = await expenses.client.request(method, path.format(id="exp-2005"), headers=ALICE | key("k1"))
    missing = await expenses.client.request(method, path.format(id="exp-9999"), headers=ALICE | key("k2"))
    assert (theirs.status_code, theirs.json()) == (404, {"error": "not_found"})
    assert (theirs.headers["content-type"], theirs.content) == (missing.headers["content-type"], missing.content)
    assert expenses.service.reports["exp-2005"].status == "submitted"


async def test_submitting_twice_with_one_key_files_one_report_and_replays(expenses: Expenses) -> None:
    """The retry returns the same 201 and report, marked as replayed; the report exists once."""
    first = await expenses.client.post("/reports", json=TAXI, headers=BOB | key("s1"))
    again = await expenses.client.post("/reports", json=TAXI, headers=BOB | key("s1"))
    assert (first.status_code, first.json()) == (
        201,
        {
            "report_id": "exp-2007",
            "org": "acme",
            "submitted_by": "bob@acme.example",
            "mine": True,
            "title": "Taxi to the client",
            "amount_cents": 3_400,
            "currency": "EUR",
            "status": "submitted",
            "note": "",
        },
    )
    assert (again.status_code, again.content, again.headers["idempotent-replayed"]) == (201, first.content, "true")
    assert len(expenses.service.reports) == 7


async def test_reusing_a_key_for_another_amount_is_refused_422(expenses: Expenses) -> None:
    """A different body under a used key is a conflict, never a second report."""
    await expenses.client.post("/reports", json=TAXI, headers=BOB | key("s1"))
    response = await expenses.client.post("/reports", json=TAXI | {"amount_cents": 9_999}, headers=BOB | key("s1"))
    assert (response.status_code, response.json()) == (422, {"error": "idempotency_key_reused"})
    assert len(expenses.service.reports) == 7


@pytest.mark.parametrize(
    "body",
    [
        {"title": "", "amount_cents": 100, "currency": "EUR"},
        {"title": "x", "amount_cents": 0, "currency": "EUR"},
        {"title": "x", "amount_cents": "100", "currency": "EUR"},
        {"title": "x", "amount_cents": 10_000_001, "currency": "EUR"},
        {"title": "x", "amount_cents": 100, "currency": "GBP"},
        {"title": "x", "amount_cents": 100},
        {"title": "x", "amount_cents": 100, "currency": "EUR", "status": "approved"},
    ],
)
async def test_malformed_report_is_refused_400_and_not_remembered(expenses: Expenses, body: dict[str, Any]) -> None:
    """Amounts are positive integers up to the limit, currencies USD or EUR, and no status may be smuggled in."""
    response = await expenses.client.post("/reports", json=body, headers=BOB | key("s1"))
    lookup = await expenses.client.get("/idempotency/s1", headers=BOB)
    assert (response.status_code, response.json()) == (400, {"error": "invalid_request"})
    assert lookup.json()["state"] == "unknown"


async def test_a_write_without_a_key_is_refused_400(expenses: Expenses) -> None:
    """Keys are the gateway's to mint; without one nothing is filed."""
    response = await expenses.client.post("/reports", json=TAXI, headers=BOB)
    assert (response.status_code, response.json()) == (400, {"error": "missing_idempotency_key"})


async def test_the_submitter_withdraws_a_submitted_report_back_to_draft(expenses: Expenses) -> None:
    """Withdrawing is idempotent: a retry replays the answer and the lookup says applied."""
    first = await expenses.client.post("/reports/exp-2001/withdraw", headers=ALICE | key("w1"))
    again = await expenses.client.post("/reports/exp-2001/withdraw", headers=ALICE | key("w1"))
    lookup = await expenses.client.get("/idempotency/w1", headers=ALICE)
    assert (first.status_code, first.json()) == (200, {"report_id": "exp-2001", "status": "draft"})
    assert (again.content, again.headers["idempotent-replayed"]) == (first.content, "true")
    assert (lookup.json()["state"], lookup.json()["response"]["report_id"]) == ("applied", "exp-2001")
    assert expenses.service.reports["exp-2001"].status == "draft"


@pytest.mark.parametrize(
    ("caller", "report_id", "status_code", "code"),
    [
        (BOB, "exp-2001", 404, "not_found"),
        (ALICE, "exp-2003", 409, "not_submitted"),
        (BOB, "exp-2002", 409, "not_submitted"),
        (BOB, "exp-2004", 409, "not_submitted"),
    ],
)
async def test_withdrawing_someone_elses_or_a_non_submitted_report_is_refused_and_remembered(
    expenses: Expenses, caller: dict[str, str], report_id: str, status_code: int, code: str
) -> None:
    """A colleague's report does not exist for withdrawing; drafts, approved and paid reports stay as they are."""
    before = expenses.service.reports[report_id]
    response = await expenses.client.post(f"/reports/{report_id}/withdraw", headers=caller | key("w1"))
    lookup = await expenses.client.get("/idempotency/w1", headers=caller)
    assert (response.status_code, response.json()) == (status_code, {"error": code})
    assert (lookup.json()["state"], lookup.json()["status_code"]) == ("refused", status_code)
    assert expenses.service.reports[report_id] == before


async def test_dropped_submit_answer_is_found_applied_by_key(expenses: Expenses) -> None:
    """Expenses shares the fault switch: a report whose answer was cut is filed once and reported applied."""
    fault = {"drop_after_commit": True, "paths": ["/reports"], "times": 1}
    assert (await expenses.client.put("/_faults", json=fault)).status_code == 200
    with anyio.fail_after(5), pytest.raises(httpx.RemoteProtocolError):
        await expenses.client.post("/reports", json=TAXI, headers=BOB | key("s1"))
    lookup = await expenses.client.get("/idempotency/s1", headers=BOB)
    assert (lookup.json()["state"], lookup.json()["response"]["report_id"]) == ("applied", "exp-2007")
    assert len(expenses.service.reports) == 7


def test_the_manifest_is_a_valid_adapter_manifest() -> None:
    """What the service registers passes the gateway's manifest model as it stands."""
    manifest = AdapterManifest.model_validate(expenses_manifest("http://127.0.0.1:9000"))
    assert manifest.base_url == "http://127.0.0.1:9000"
    assert [(tool.name, tool.mode, tool.access.public, tool.access.roles) for tool in manifest.tools] == [
        ("expenses_list", "read", True, ()),
        ("expenses_get", "read", False, ("staff",)),
        ("expenses_submit", "write", False, ("staff",)),
        ("expenses_withdraw", "write", False, ("staff",)),
    ]
    assert manifest.credential is not None and manifest.credential.secret_env == "EXPENSES_BACKEND_TOKEN"


def test_the_manifest_raises_no_review_flag_and_passes_a_loopback_allowlist() -> None:
    """The demo's own manifest is clean, and its loopback URL passes only where an operator named it."""
    manifest = AdapterManifest.model_validate(expenses_manifest("http://127.0.0.1:9000"))
    assert review_manifest(manifest, other_tool_names=frozenset({"orders_refund_create", "rooms_book"})) == ()
    assert check_base_url(manifest.base_url, allowed=("http://127.0.0.1:*",)) == ()
    assert check_base_url(manifest.base_url, allowed=("http://*:*",)) != ()


def test_each_manifest_call_returns_a_fresh_copy() -> None:
    """Editing one manifest (as a registration flow may) never changes the next."""
    first = expenses_manifest("http://a.example")
    first["tools"][0]["description"] = "changed"
    assert expenses_manifest("http://b.example")["tools"][0]["description"] != "changed"


@pytest.mark.parametrize(
    ("tool", "args", "status_code"),
    [
        ("expenses_list", {"status": "submitted"}, 200),
        ("expenses_get", {"report_id": "exp-2001"}, 200),
        ("expenses_submit", TAXI, 201),
        ("expenses_withdraw", {"report_id": "exp-2001"}, 200),
    ],
)
async def test_each_manifest_tool_is_served_at_its_method_and_path(
    expenses: Expenses, tool: str, args: dict[str, Any], status_code: int
) -> None:
    """Called the way the gateway calls a manifest tool (placeholders filled, GET args as the query, the rest
    as the JSON body), each tool's answer validates against the output model built from its manifest."""
    spec = next(t for t in expenses_manifest(expenses.url)["tools"] if t["name"] == tool)
    path = spec["path"].replace("{report_id}", args.get("report_id", ""))
    rest = {name: value for name, value in args.items() if f"{{{name}}}" not in spec["path"]}
    sent = {"params": rest} if spec["method"] == "GET" else {"json": rest}
    response = await expenses.client.request(spec["method"], path, headers=ALICE | key("m1"), **sent)
    model = output_model(tool, spec["output_schema"], untrusted=tuple(spec.get("untrusted_output_fields", ())))
    assert response.status_code == status_code
    model.model_validate_json(response.content, strict=True)
