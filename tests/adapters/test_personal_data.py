"""No tool of any demo adapter shows the model who else is in the data: only the caller's own identity.

Other people's identities are third-party data. Each example seeds the demo services with generated
colleagues (their bookings, their expense reports, an order of theirs) and has one of them reject the
caller's card, then calls every tool the caller is offered and reads everything the model would.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from starlette.datastructures import Secret

from adapters import load_adapter
from backends.demo_data import Booking
from backends.expenses import ExpenseReport, create_expenses_app, expenses_manifest
from backends.orders import create_orders_app
from backends.rooms import create_rooms_app
from backends.serve import serve_app_in_thread
from gateway.config.settings import AdapterSettings, OrgSettings, Settings
from gateway.principal import Principal
from gateway.registry.manifest import AdapterManifest
from gateway.registry.tools import tools_from_manifest
from gateway.runtime.app import Gateway
from tests.support.examples import examples
from tests.support.services import TEST_AUDIT_SECRET, Backend, in_process_gateway

AUDIT = Secret(TEST_AUDIT_SECRET)

pytestmark = pytest.mark.anyio

EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
PEOPLE = st.from_regex(r"[a-z]{2,8}(\.[a-z]{2,8})?", fullmatch=True).map(lambda name: f"{name}@acme.example")
DAY = "2026-12-10"
ROLES = frozenset({"staff", "support"})

Ids = Mapping[str, str]
ARGUMENTS: dict[str, Callable[[Ids], dict[str, Any]]] = {
    "rooms_list": lambda ids: {},
    "rooms_availability": lambda ids: {"room_id": "room-atlas", "date": DAY},
    "rooms_my_bookings": lambda ids: {},
    "rooms_book": lambda ids: {"room_id": "room-eos", "date": DAY, "start": "15:00", "end": "16:00", "title": "x"},
    "rooms_cancel_booking": lambda ids: {"booking_id": ids["own_booking"]},
    "orders_get": lambda ids: {"order_id": "ord-1001"},
    "orders_customer_note": lambda ids: {"order_id": "ord-1001"},
    "orders_refund_eligibility": lambda ids: {"order_id": "ord-1001"},
    "orders_refund_create": lambda ids: {"order_id": "ord-1001", "amount_cents": 100, "reason": "damaged"},
    "expenses_list": lambda ids: {},
    "expenses_get": lambda ids: {"report_id": ids["colleagues_report"]},
    "expenses_submit": lambda ids: {"title": "Taxi", "amount_cents": 900, "currency": "EUR"},
    "expenses_withdraw": lambda ids: {"report_id": ids["own_report"]},
    "approvals_status": lambda ids: {"card_id": ids["rejected_card"]},
    "approvals_mine": lambda ids: {},
    "approvals_cancel": lambda ids: {"card_id": ids["open_card"]},
}
"""Arguments for every tool of every demo adapter; a tool missing here fails the test."""


@pytest.fixture(scope="module")
def services() -> Iterator[dict[str, Backend]]:
    """Fresh rooms, orders and expenses services for this module alone (the tests change their data)."""
    started: dict[str, Backend] = {}
    tokens = {name: secrets.token_hex(8) for name in ("rooms", "orders", "expenses")}
    keys = {name: secrets.token_hex(16) for name in tokens}
    rooms = create_rooms_app(service_token=tokens["rooms"], signing_key=keys["rooms"])
    orders = create_orders_app(service_token=tokens["orders"], signing_key=keys["orders"])
    expenses = create_expenses_app(service_token=tokens["expenses"], signing_key=keys["expenses"])
    with serve_app_in_thread(rooms) as rooms_url, serve_app_in_thread(orders) as orders_url:
        with serve_app_in_thread(expenses) as expenses_url:
            for name, app, url in (("rooms", rooms, rooms_url), ("orders", orders, orders_url),
                                   ("expenses", expenses, expenses_url)):  # fmt: skip
                started[name] = Backend(url=url, token=tokens[name], app=app, signing_key=keys[name])
            yield started


@pytest.fixture(scope="module")
async def gateway(quiet_redis_url: str, services: dict[str, Backend]) -> AsyncIterator[Gateway]:
    """Every demo adapter, expenses by its manifest, on a database no worker drains."""
    org = OrgSettings(name="acme", adapters=frozenset(services), roles=ROLES)
    adapters = {
        name: AdapterSettings(name=name, url=b.url, token=Secret(b.token), signing_key=Secret(b.signing_key))
        for name, b in services.items()
    }
    manifest = AdapterManifest.model_validate(expenses_manifest(services["expenses"].url))
    tools = [*load_adapter("rooms"), *load_adapter("orders"), *load_adapter("approvals")]
    tools += tools_from_manifest("expenses", manifest)
    settings = Settings(redis_url=quiet_redis_url, adapters=adapters, orgs=(org,), audit_secret=AUDIT)
    async with in_process_gateway(settings, tools) as wired:
        yield wired


def _seed(services: dict[str, Backend], caller: str, colleagues: list[str]) -> Callable[[], None]:
    """Bookings and reports by the caller and each colleague, and an order placed by a colleague."""
    rooms, expenses = services["rooms"].app.state.service, services["expenses"].app.state.service
    orders = services["orders"].app.state.service
    people = [caller, *colleagues]
    for number, person in enumerate(people):
        rooms.bookings[f"bk-{9000 + number}"] = Booking(
            booking_id=f"bk-{9000 + number}", room_id="room-atlas", date=DAY, start=f"{8 + number:02d}:00",
            end=f"{8 + number:02d}:30", title="Sync", booked_by=person, org="acme",
        )  # fmt: skip
        expenses.reports[f"exp-{9000 + number}"] = ExpenseReport(
            report_id=f"exp-{9000 + number}", org="acme", submitted_by=person, title="Taxi", amount_cents=100,
            currency="EUR", status="submitted",
        )  # fmt: skip
    original = orders.orders["ord-1001"]
    orders.orders["ord-1001"] = replace(original, customer=colleagues[0])

    def undo() -> None:
        for number in range(len(people)):
            rooms.bookings.pop(f"bk-{9000 + number}", None)
            expenses.reports.pop(f"exp-{9000 + number}", None)
        orders.orders["ord-1001"] = original

    return undo


@settings(database=None, deadline=None, max_examples=examples(15))
@given(caller=PEOPLE, colleagues=st.lists(PEOPLE, min_size=1, max_size=3, unique=True))
async def test_no_tool_shows_the_model_anyone_but_the_caller(
    gateway: Gateway, services: dict[str, Backend], quiet_redis_url: str, caller: str, colleagues: list[str]
) -> None:
    """For every tool the caller is offered, no email address other than the caller's own appears in what
    the model receives: not a colleague's booking, report or order, not the admin who rejected a card."""
    colleagues = [person for person in colleagues if person != caller] or ["someone.else@acme.example"]
    principal = Principal(subject=caller, org="acme", roles=ROLES, key_id=f"key_{secrets.token_hex(4)}")
    offered = {tool.name for tool in gateway.catalog.visible_to(principal, gateway.catalog.current())}
    assert offered == set(ARGUMENTS)
    undo = _seed(services, caller, colleagues)
    redis = Redis.from_url(quiet_redis_url)
    agent = gateway.executor.agent
    try:
        rejected = await agent.execute(principal, "orders_refund_create", ARGUMENTS["orders_refund_create"]({}))
        rejected_card = rejected.for_model()["card_id"]
        assert (await gateway.ledger.reject(rejected_card, admin=colleagues[0], reason="not now")).ok
        open_card = (await agent.execute(principal, "rooms_book", ARGUMENTS["rooms_book"]({}))).for_model()["card_id"]
        ids = {"own_booking": "bk-9000", "own_report": "exp-9000", "colleagues_report": "exp-9001",
               "rejected_card": rejected_card, "open_card": open_card}  # fmt: skip
        for name, arguments in ARGUMENTS.items():
            envelope = await agent.execute(principal, name, arguments(ids))
            seen = json.dumps(envelope.for_model(), ensure_ascii=False)
            assert not envelope.is_error, (name, seen)
            assert set(EMAIL.findall(seen)) <= {caller}, (name, seen)
    finally:
        undo()
        await redis.flushdb()
        await redis.aclose()
