"""Switchable faults, exercised through the rooms service over a real connection.

The fault switch sits in the service shell both services share; ``test_orders.py`` checks that orders is
wired to it too.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest

from backends import RoomsService
from tests.support.services import TEST_SIGNING_KEY, signed_identity

if TYPE_CHECKING:
    from conftest import Running

pytestmark = pytest.mark.anyio

ALICE = signed_identity("alice@acme.example", "acme", audience="rooms", key=TEST_SIGNING_KEY)
DESIGN_REVIEW = {"room_id": "room-borealis", "date": "2026-12-02", "start": "10:00", "end": "11:00", "title": "Review"}
NO_FAULT = {
    "latency_ms": 0,
    "status": None,
    "retry_after": None,
    "hang": False,
    "drop_after_commit": False,
    "reply_after_commit_ms": 0,
    "paths": [],
    "times": None,
}


def key(value: str) -> dict[str, str]:
    return {"Idempotency-Key": value}


async def install(rooms: Running[RoomsService], **spec: Any) -> None:
    response = await rooms.client.put("/_faults", json=spec)
    assert response.status_code == 200, response.text


async def test_latency_fault_delays_the_answer(rooms: Running[RoomsService]) -> None:
    """With ``latency_ms`` the answer is the normal one, only later."""
    await install(rooms, latency_ms=200, times=1)
    with anyio.fail_after(5):
        started = time.monotonic()
        response = await rooms.client.get("/rooms", headers=ALICE)
        elapsed = time.monotonic() - started
    assert response.status_code == 200
    assert elapsed >= 0.2


async def test_status_fault_answers_that_status_and_applies_nothing(rooms: Running[RoomsService]) -> None:
    """A 503 fault neither books nor remembers the key, so the same request applies once the fault is gone."""
    await install(rooms, status=503, paths=["/bookings"])
    faulted = await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    unaffected = await rooms.client.get("/rooms", headers=ALICE)
    lookup = await rooms.client.get("/idempotency/k1", headers=ALICE)
    await rooms.client.delete("/_faults")
    retried = await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    assert (faulted.status_code, faulted.json()) == (503, {"error": "injected_fault"})
    assert unaffected.status_code == 200
    assert lookup.json()["state"] == "unknown"
    assert retried.status_code == 201
    assert "idempotent-replayed" not in retried.headers
    assert len(rooms.service.bookings) == 8


async def test_hang_fault_holds_the_request_until_the_client_times_out(rooms: Running[RoomsService]) -> None:
    """The client gives up with a read timeout and nothing was booked."""
    await install(rooms, hang=True, times=1)
    with anyio.fail_after(5), pytest.raises(httpx.ReadTimeout):
        await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"), timeout=0.3)
    lookup = await rooms.client.get("/idempotency/k1", headers=ALICE)
    assert lookup.json()["state"] == "unknown"
    assert len(rooms.service.bookings) == 7


async def test_drop_after_commit_cuts_the_answer_but_the_booking_exists(rooms: Running[RoomsService]) -> None:
    """The client sees a broken response; the booking and its key record exist, and a retry replays the answer."""
    await install(rooms, drop_after_commit=True, paths=["/bookings"], times=1)
    with anyio.fail_after(5), pytest.raises(httpx.RemoteProtocolError):
        await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    lookup = await rooms.client.get("/idempotency/k1", headers=ALICE)
    retried = await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    assert len(rooms.service.bookings) == 8
    assert lookup.json()["state"] == "applied"
    assert lookup.json()["response"]["booking_id"] == "bk-0008"
    assert (retried.status_code, retried.headers["idempotent-replayed"]) == (201, "true")
    assert retried.json() == lookup.json()["response"]


async def test_fault_with_times_clears_itself_after_that_many_requests(rooms: Running[RoomsService]) -> None:
    """``times`` counts down on each matching request and the fault is gone when it reaches zero."""
    await install(rooms, status=503, times=2)
    first = await rooms.client.get("/rooms", headers=ALICE)
    remaining = (await rooms.client.get("/_faults")).json()["faults"]["times"]
    second = await rooms.client.get("/rooms", headers=ALICE)
    third = await rooms.client.get("/rooms", headers=ALICE)
    assert [first.status_code, second.status_code, third.status_code] == [503, 503, 200]
    assert remaining == 1
    assert (await rooms.client.get("/_faults")).json() == {"faults": None}


async def test_control_paths_are_never_faulted(rooms: Running[RoomsService]) -> None:
    """A fault on every path still leaves health, fault control and the request log answering."""
    await install(rooms, status=503)
    assert (await rooms.client.get("/rooms", headers=ALICE)).status_code == 503
    for path in ("/_health", "/_faults", "/_requests"):
        assert (await rooms.client.get(path)).status_code == 200, path


async def test_faults_can_be_read_back_and_cleared(rooms: Running[RoomsService]) -> None:
    """``PUT`` and ``GET`` show the fault with defaults filled in; ``DELETE`` clears it."""
    installed = (await rooms.client.put("/_faults", json={"latency_ms": 5, "paths": ["/rooms"]})).json()
    read = (await rooms.client.get("/_faults")).json()
    cleared = (await rooms.client.delete("/_faults")).json()
    assert installed == read == {"faults": NO_FAULT | {"latency_ms": 5, "paths": ["/rooms"]}}
    assert cleared == {"faults": None}


@pytest.mark.parametrize(
    "spec",
    [{"latency_ms": -1}, {"status": 200}, {"status": "503"}, {"hang": 1}, {"times": 0}, {"paths": "/x"}, {"bogus": 1}],
)
async def test_malformed_fault_is_refused_400_and_installs_nothing(
    rooms: Running[RoomsService], spec: dict[str, Any]
) -> None:
    """Fault specs are validated strictly; a bad one leaves the service as it was."""
    response = await rooms.client.put("/_faults", json=spec)
    assert (response.status_code, response.json()) == (400, {"error": "invalid_faults"})
    assert (await rooms.client.get("/_faults")).json() == {"faults": None}


async def test_fault_control_requires_the_service_token(rooms: Running[RoomsService]) -> None:
    """Without the token nobody can switch faults on."""
    async with httpx.AsyncClient(base_url=rooms.url) as anonymous:
        response = await anonymous.put("/_faults", json={"status": 503})
    assert response.status_code == 401
    assert rooms.service.faults.active is None


async def test_reply_after_commit_applies_at_once_and_answers_late(rooms: Running[RoomsService]) -> None:
    """The booking exists while the client still waits for its answer; the client times out."""
    await install(rooms, reply_after_commit_ms=3000, paths=["/bookings"], times=1)
    with anyio.fail_after(5), pytest.raises(httpx.ReadTimeout):
        await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"), timeout=0.3)
    lookup = await rooms.client.get("/idempotency/k1", headers=ALICE)
    assert lookup.json()["state"] == "applied"
    assert len(rooms.service.bookings) == 8
