"""A demo backend given a state file keeps its writes and its idempotency records across a restart.

Each test writes through one app, then builds a second app from the same file (as a restarted
`countersign serve` does) and checks over real HTTP that the write is still there, that a retry with
the same key replays the same answer without a second effect, and that the key's status survives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from backends._persist import StateFile, StateFileError
from backends.expenses import create_expenses_app
from backends.orders import create_orders_app
from backends.rooms import create_rooms_app
from tests.support.services import TEST_SIGNING_KEY, signed_identity

if TYPE_CHECKING:
    from conftest import AppHost

pytestmark = pytest.mark.anyio

TOKEN = "backend-test-token"

# (factory, audience, write path, body, where the write can be read back, and what shows it there)
WRITES: dict[str, tuple[Callable[..., Any], str, str, dict[str, Any], Callable[[dict[str, Any]], str]]] = {
    "rooms": (
        create_rooms_app,
        "rooms",
        "/bookings",
        {"room_id": "room-borealis", "date": "2026-12-09", "start": "10:00", "end": "11:00", "title": "Review"},
        lambda answer: f"/bookings/{answer['booking_id']}",
    ),
    "orders": (
        create_orders_app,
        "orders",
        "/orders/ord-1002/refunds",
        {"amount_cents": 1_000, "reason": "Scratched"},
        lambda answer: "/orders/ord-1002",
    ),
    "expenses": (
        create_expenses_app,
        "expenses",
        "/reports",
        {"title": "Train to Lyon", "amount_cents": 9_900, "currency": "EUR"},
        lambda answer: f"/reports/{answer['report_id']}",
    ),
}


async def _call(host: AppHost, app: Any, method: str, path: str, **kwargs: Any) -> httpx.Response:
    with host.hosting(app):
        async with httpx.AsyncClient(base_url=host.url, headers={"authorization": f"Bearer {TOKEN}"}) as client:
            return await client.request(method, path, **kwargs)


@pytest.mark.parametrize("name", list(WRITES))
async def test_a_write_and_its_key_outlive_the_app(app_host: AppHost, tmp_path: Path, name: str) -> None:
    """Written by one app, read by the next one on the same file; the retry is a replay, not a second write."""
    factory, audience, path, body, read_back = WRITES[name]
    state = tmp_path / "backends" / f"{name}.json"
    identity = signed_identity("alice@acme.example", "acme", audience=audience, key=TEST_SIGNING_KEY)
    headers = {**identity, "Idempotency-Key": "key-1"}

    first = factory(service_token=TOKEN, signing_key=TEST_SIGNING_KEY, state_file=state)
    written = await _call(app_host, first, "POST", path, json=body, headers=headers)
    assert written.status_code == 201, written.text
    assert state.exists() and [p.name for p in state.parent.iterdir()] == [state.name]  # no draft left behind

    second = factory(service_token=TOKEN, signing_key=TEST_SIGNING_KEY, state_file=state)
    shown = await _call(app_host, second, "GET", read_back(written.json()), headers=identity)
    retried = await _call(app_host, second, "POST", path, json=body, headers=headers)
    status = await _call(app_host, second, "GET", "/idempotency/key-1", headers=identity)
    assert shown.status_code == 200
    assert (retried.status_code, retried.json()) == (201, written.json())
    assert retried.headers["idempotent-replayed"] == "true"
    assert status.json()["state"] == "applied" and status.json()["response"] == written.json()
    if name == "orders":
        assert shown.json()["refunded_cents"] == 1_000  # once, though the refund was sent twice


async def test_without_a_state_file_a_backend_starts_from_its_seed_data(app_host: AppHost, tmp_path: Path) -> None:
    """Tests and scripts build backends without a file: nothing is written, each app starts afresh."""
    identity = signed_identity("alice@acme.example", "acme", audience="rooms", key=TEST_SIGNING_KEY)
    _factory, _audience, path, body, _read_back = WRITES["rooms"]
    first = create_rooms_app(service_token=TOKEN, signing_key=TEST_SIGNING_KEY)
    await _call(app_host, first, "POST", path, json=body, headers={**identity, "Idempotency-Key": "k"})
    second = create_rooms_app(service_token=TOKEN, signing_key=TEST_SIGNING_KEY)
    mine = await _call(app_host, second, "GET", "/bookings/mine", headers=identity)
    assert "2026-12-09" not in mine.text


@pytest.mark.parametrize("text", ["{not json", '{"format": 99}', '{"format": 1, "business": {}}', "[]"])
def test_a_state_file_it_cannot_read_is_refused_rather_than_replaced(tmp_path: Path, text: str) -> None:
    """Starting from the seed data over an unreadable file would forget writes the gateway recorded as done."""
    state = tmp_path / "rooms.json"
    state.write_text(text)
    with pytest.raises(StateFileError):
        create_rooms_app(service_token=TOKEN, signing_key=TEST_SIGNING_KEY, state_file=state)
    assert state.read_text() == text


def test_saving_replaces_the_whole_document(tmp_path: Path) -> None:
    """The file holds the last document saved, never a mix of two."""
    file = StateFile(tmp_path / "state.json")
    file.save({"business": {"n": 1}, "idempotency": []})
    file.save({"business": {"n": 2}, "idempotency": []})
    assert file.load() == {"business": {"n": 2}, "idempotency": [], "format": 1}
