"""The rooms service over real HTTP: auth, org scoping, bookings, idempotency and the request log.

Faults are tested in ``test_faults.py``; they live in the shared service shell.
"""

from __future__ import annotations

import base64
import json
import time
from typing import TYPE_CHECKING

import httpx
import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends import RoomsService, create_rooms_app
from backends._http import IDENTITY_HEADER
from backends.demo_data import HIDDEN_TITLE, HOSTILE_TITLE
from gateway.signing.identity import ISSUER
from tests.support.examples import examples
from tests.support.services import TEST_SIGNING_KEY, signed_identity

if TYPE_CHECKING:
    from conftest import AppHost, Running

pytestmark = pytest.mark.anyio

ALICE = signed_identity("alice@acme.example", "acme", audience="rooms", key=TEST_SIGNING_KEY)
BOB = signed_identity("bob@acme.example", "acme", audience="rooms", key=TEST_SIGNING_KEY)
HANK = signed_identity("hank@globex.example", "globex", audience="rooms", key=TEST_SIGNING_KEY)
DESIGN_REVIEW = {"room_id": "room-borealis", "date": "2026-12-02", "start": "10:00", "end": "11:00", "title": "Review"}


def key(value: str) -> dict[str, str]:
    return {"Idempotency-Key": value}


def same_answer(first: httpx.Response, second: httpx.Response) -> bool:
    return (first.status_code, first.headers["content-type"], first.content) == (
        second.status_code,
        second.headers["content-type"],
        second.content,
    )


async def test_health_answers_without_any_credentials(rooms: Running[RoomsService]) -> None:
    """``GET /_health`` is the one request that needs no service token."""
    async with httpx.AsyncClient(base_url=rooms.url) as anonymous:
        response = await anonymous.get("/_health")
    assert (response.status_code, response.json()) == (200, {"ok": True})


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", "Basic YmFja2VuZC10ZXN0LXRva2Vu", "Bearer"])
async def test_request_without_the_service_token_is_refused_401(
    rooms: Running[RoomsService], authorization: str | None
) -> None:
    """Anything but ``Bearer <service token>`` gets 401 ``unauthorized`` and reaches no route."""
    headers = ALICE if authorization is None else ALICE | {"Authorization": authorization}
    async with httpx.AsyncClient(base_url=rooms.url) as other:
        response = await other.get("/rooms", headers=headers)
    assert (response.status_code, response.json()) == (401, {"error": "unauthorized"})
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "identity",
    [
        {},
        {"X-Countersign-Subject": "alice@acme.example"},
        {"X-Countersign-Subject": "alice@acme.example", "X-Countersign-Org": "acme"},
    ],
)
async def test_request_without_a_signed_identity_is_refused_400(
    rooms: Running[RoomsService], identity: dict[str, str]
) -> None:
    """The plain identity headers alone name nobody: without the signed one the request reaches no route."""
    response = await rooms.client.get("/bookings/mine", headers=identity)
    assert (response.status_code, response.json()) == (400, {"error": "missing_identity"})


def _claims(**changes: object) -> dict[str, object]:
    now = int(time.time())
    claims: dict[str, object] = {"iss": ISSUER, "sub": "hank@globex.example", "org": "globex", "aud": "rooms",
                                 "iat": now, "exp": now + 60}  # fmt: skip
    claims.update(changes)
    return {name: value for name, value in claims.items() if value is not None}


def _tampered() -> str:
    """Alice's valid token with Hank's claims pasted in: the signature no longer matches."""
    header, _payload, signature = ALICE[IDENTITY_HEADER].split(".")
    payload = base64.urlsafe_b64encode(json.dumps(_claims()).encode()).rstrip(b"=").decode()
    return f"{header}.{payload}.{signature}"


INVALID_IDENTITIES = {
    "another key": jwt.encode(_claims(), "not-the-backends-key-0123456789abcdef", algorithm="HS256"),
    "another service": signed_identity("hank@globex.example", "globex", audience="orders", key=TEST_SIGNING_KEY)[
        IDENTITY_HEADER
    ],
    "expired": jwt.encode(_claims(exp=int(time.time()) - 5), TEST_SIGNING_KEY, algorithm="HS256"),
    "another issuer": jwt.encode(_claims(iss="mallory"), TEST_SIGNING_KEY, algorithm="HS256"),
    "no org": jwt.encode(_claims(org=None), TEST_SIGNING_KEY, algorithm="HS256"),
    "blank org": jwt.encode(_claims(org=" "), TEST_SIGNING_KEY, algorithm="HS256"),
    "unsigned": jwt.encode(_claims(), None, algorithm="none"),
    "tampered": _tampered(),
    "not a token": "hank@globex.example",
}


@pytest.mark.parametrize("identity", INVALID_IDENTITIES.values(), ids=INVALID_IDENTITIES.keys())
async def test_a_write_whose_signed_identity_does_not_verify_is_refused_401_and_applies_nothing(
    rooms: Running[RoomsService], identity: str
) -> None:
    """Wrong key, audience or issuer, expired, unsigned or tampered: refused, whatever the plain headers say."""
    before = dict(rooms.service.bookings)
    headers = {**HANK, IDENTITY_HEADER: identity, **key("forged")}
    response = await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=headers)
    mine = await rooms.client.get("/bookings/mine", headers={**HANK, IDENTITY_HEADER: identity})
    assert (response.status_code, response.json()) == (401, {"error": "invalid_identity"})
    assert (mine.status_code, mine.json()) == (401, {"error": "invalid_identity"})
    assert rooms.service.bookings == before


@settings(max_examples=examples(50), deadline=None)
@given(token=st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=300))
def test_no_made_up_identity_reaches_a_route(app_host: AppHost, token: str) -> None:
    """Whatever text stands in the signed header, without the gateway's signature nothing is admitted."""
    app = create_rooms_app(service_token="t", signing_key=TEST_SIGNING_KEY)
    with app_host.hosting(app), httpx.Client(base_url=app_host.url, timeout=5) as client:
        response = client.get("/bookings/mine", headers={"Authorization": "Bearer t", IDENTITY_HEADER: token})
    assert (response.status_code, response.json()) == (401, {"error": "invalid_identity"})


def test_an_empty_signing_key_is_refused_at_construction() -> None:
    """An empty key would make anyone's claim verify, so the factory refuses it."""
    with pytest.raises(ValueError):
        create_rooms_app(service_token="t", signing_key="")


async def test_every_room_is_listed_to_both_orgs(rooms: Running[RoomsService]) -> None:
    """Rooms are shared by the building, so both orgs see the same five."""
    for_acme = (await rooms.client.get("/rooms", headers=ALICE)).json()
    for_globex = (await rooms.client.get("/rooms", headers=HANK)).json()
    assert for_acme == for_globex
    assert for_acme["rooms"][0] == {"id": "room-atlas", "name": "Atlas", "floor": 1, "capacity": 8}
    assert len(for_acme["rooms"]) == 5


async def test_availability_shows_other_orgs_bookings_with_their_titles_verbatim(rooms: Running[RoomsService]) -> None:
    """Hostile and invisible-Unicode titles by globex reach an acme caller unaltered, for the gateway to fence."""
    atlas = await rooms.client.get("/rooms/room-atlas/availability", params={"date": "2026-12-01"}, headers=ALICE)
    cirrus = await rooms.client.get("/rooms/room-cirrus/availability", params={"date": "2026-12-02"}, headers=ALICE)
    assert atlas.json() | {"bookings": None} == {
        "room_id": "room-atlas",
        "date": "2026-12-01",
        "open": "08:00",
        "close": "18:00",
        "today": "2026-12-01",
        "bookings": None,
    }
    assert [b["booking_id"] for b in atlas.json()["bookings"]] == ["bk-0001", "bk-0002"]
    assert atlas.json()["bookings"][1] == {
        "booking_id": "bk-0002",
        "start": "10:30",
        "end": "11:30",
        "title": HOSTILE_TITLE,
        "booked_by": "hank@globex.example",
        "org": "globex",
    }
    assert cirrus.json()["bookings"][0]["title"] == HIDDEN_TITLE
    assert any(0xE0000 <= ord(char) <= 0xE007F for char in HIDDEN_TITLE)


async def test_availability_leaves_out_cancelled_bookings(rooms: Running[RoomsService]) -> None:
    """The cancelled demo booking in Eos does not block its slot."""
    response = await rooms.client.get("/rooms/room-eos/availability", params={"date": "2026-12-03"}, headers=ALICE)
    assert response.json()["bookings"] == []


@pytest.mark.parametrize("day", ["2026-13-01", "2026-02-30", "20261201", "tomorrow", ""])
async def test_availability_for_a_malformed_date_is_refused_400(rooms: Running[RoomsService], day: str) -> None:
    """Only real ``YYYY-MM-DD`` dates are accepted."""
    response = await rooms.client.get("/rooms/room-atlas/availability", params={"date": day}, headers=ALICE)
    assert (response.status_code, response.json()) == (400, {"error": "invalid_date"})


async def test_availability_of_an_unknown_room_is_not_found(rooms: Running[RoomsService]) -> None:
    """An unknown room answers 404 ``not_found``."""
    response = await rooms.client.get("/rooms/room-zeta/availability", params={"date": "2026-12-01"}, headers=ALICE)
    assert (response.status_code, response.json()) == (404, {"error": "not_found"})


async def test_another_orgs_booking_answers_exactly_like_a_missing_one(rooms: Running[RoomsService]) -> None:
    """Reading or cancelling globex's booking as acme is byte-for-byte the answer for a booking that never existed."""
    theirs = await rooms.client.get("/bookings/bk-0002", headers=ALICE)
    missing = await rooms.client.get("/bookings/bk-9999", headers=ALICE)
    cancel_theirs = await rooms.client.post("/bookings/bk-0002/cancel", headers=ALICE | key("c1"))
    cancel_missing = await rooms.client.post("/bookings/bk-9999/cancel", headers=ALICE | key("c2"))
    assert (theirs.status_code, theirs.json()) == (404, {"error": "not_found"})
    assert same_answer(theirs, missing)
    assert same_answer(cancel_theirs, cancel_missing)
    assert rooms.service.bookings["bk-0002"].status == "active"


async def test_own_orgs_booking_is_shown_in_full(rooms: Running[RoomsService]) -> None:
    """A colleague's booking is visible to the same org."""
    response = await rooms.client.get("/bookings/bk-0001", headers=BOB)
    assert response.json() == {
        "booking_id": "bk-0001",
        "room_id": "room-atlas",
        "date": "2026-12-01",
        "start": "09:00",
        "end": "10:00",
        "title": "Sprint planning",
        "booked_by": "alice@acme.example",
        "org": "acme",
        "status": "active",
    }


async def test_my_bookings_lists_only_the_callers_own_bookings(rooms: Running[RoomsService]) -> None:
    """``/bookings/mine`` is by subject, across dates, including cancelled ones."""
    response = await rooms.client.get("/bookings/mine", headers=ALICE)
    assert response.json() == {
        "bookings": [
            {
                "booking_id": "bk-0001",
                "room_id": "room-atlas",
                "date": "2026-12-01",
                "start": "09:00",
                "end": "10:00",
                "title": "Sprint planning",
                "status": "active",
            },
            {
                "booking_id": "bk-0007",
                "room_id": "room-eos",
                "date": "2026-12-03",
                "start": "09:00",
                "end": "09:30",
                "title": "All-hands dry run",
                "status": "cancelled",
            },
        ]
    }


async def test_booking_a_free_slot_twice_with_one_key_books_once_and_replays(rooms: Running[RoomsService]) -> None:
    """The retry gets the same 201 and body, marked as replayed, and there is still one new booking."""
    before = len(rooms.service.bookings)
    first = await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    again = await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    assert first.status_code == 201
    assert first.json() == DESIGN_REVIEW | {
        "booking_id": "bk-0008",
        "booked_by": "alice@acme.example",
        "org": "acme",
        "status": "active",
    }
    assert "idempotent-replayed" not in first.headers
    assert same_answer(first, again)
    assert again.headers["idempotent-replayed"] == "true"
    assert len(rooms.service.bookings) == before + 1


async def test_replay_matches_a_body_that_only_differs_in_json_formatting(rooms: Running[RoomsService]) -> None:
    """The fingerprint is over canonical JSON, so key order and spacing do not make a different request."""
    await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    reordered = (
        '{ "title": "Review", "end": "11:00", "start": "10:00", "date": "2026-12-02", "room_id": "room-borealis" }'
    )
    again = await rooms.client.post(
        "/bookings", content=reordered, headers=ALICE | key("k1") | {"Content-Type": "application/json"}
    )
    assert (again.status_code, again.headers["idempotent-replayed"]) == (201, "true")


@pytest.mark.parametrize(
    ("who", "body"),
    [(ALICE, DESIGN_REVIEW | {"title": "Something else"}), (BOB, DESIGN_REVIEW)],
)
async def test_reusing_a_key_for_a_different_request_is_refused_422(
    rooms: Running[RoomsService], who: dict[str, str], body: dict[str, str]
) -> None:
    """Another body, or another subject of the same org, under a used key is a conflict, not a replay."""
    await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    before = len(rooms.service.bookings)
    response = await rooms.client.post("/bookings", json=body, headers=who | key("k1"))
    assert (response.status_code, response.json()) == (422, {"error": "idempotency_key_reused"})
    assert len(rooms.service.bookings) == before


async def test_write_without_an_idempotency_key_is_refused_and_applies_nothing(rooms: Running[RoomsService]) -> None:
    """Writes require ``Idempotency-Key``."""
    response = await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE)
    assert (response.status_code, response.json()) == (400, {"error": "missing_idempotency_key"})
    assert len(rooms.service.bookings) == 7


async def test_booking_a_taken_slot_is_refused_and_the_refusal_is_remembered(rooms: Running[RoomsService]) -> None:
    """409 ``slot_taken`` is a decision: the lookup says refused and a retry replays the same refusal."""
    overlapping = {"room_id": "room-atlas", "date": "2026-12-01", "start": "09:30", "end": "10:45", "title": "Mine"}
    first = await rooms.client.post("/bookings", json=overlapping, headers=BOB | key("k1"))
    again = await rooms.client.post("/bookings", json=overlapping, headers=BOB | key("k1"))
    lookup = await rooms.client.get("/idempotency/k1", headers=BOB)
    assert (first.status_code, first.json()) == (409, {"error": "slot_taken"})
    assert (again.status_code, again.headers["idempotent-replayed"]) == (409, "true")
    assert lookup.json() == {"key": "k1", "state": "refused", "status_code": 409, "response": {"error": "slot_taken"}}
    assert len(rooms.service.bookings) == 7


async def test_a_slot_ending_when_another_starts_is_free(rooms: Running[RoomsService]) -> None:
    """End times are exclusive: 10:00-10:30 fits between 09:00-10:00 and 10:30-11:30."""
    between = {"room_id": "room-atlas", "date": "2026-12-01", "start": "10:00", "end": "10:30", "title": "Stand-up"}
    response = await rooms.client.post("/bookings", json=between, headers=BOB | key("k1"))
    assert response.status_code == 201


@pytest.mark.parametrize(
    "change",
    [
        {"start": "11:00", "end": "10:00"},
        {"start": "07:30"},
        {"end": "18:30"},
        {"start": "9:00"},
        {"date": "2026-12-32"},
        {"title": ""},
        {"title": 42},
        {"extra": "field"},
    ],
)
async def test_malformed_booking_is_refused_400_and_not_remembered(
    rooms: Running[RoomsService], change: dict[str, object]
) -> None:
    """A 400 reached no decision, so the key stays free and the corrected request can use it."""
    malformed = await rooms.client.post("/bookings", json=DESIGN_REVIEW | change, headers=ALICE | key("k1"))
    lookup = await rooms.client.get("/idempotency/k1", headers=ALICE)
    corrected = await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    assert (malformed.status_code, malformed.json()) == (400, {"error": "invalid_request"})
    assert (lookup.status_code, lookup.json()) == (404, {"error": "not_found", "state": "unknown"})
    assert corrected.status_code == 201


async def test_booking_an_unknown_room_is_not_found(rooms: Running[RoomsService]) -> None:
    """An unknown room is 404, like on every other route."""
    response = await rooms.client.post(
        "/bookings", json=DESIGN_REVIEW | {"room_id": "room-zeta"}, headers=ALICE | key("k")
    )
    assert (response.status_code, response.json()) == (404, {"error": "not_found"})


async def test_lookup_reports_an_applied_write_with_its_response(rooms: Running[RoomsService]) -> None:
    """``GET /idempotency/{key}`` tells a caller that lost the answer what happened."""
    created = await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    lookup = await rooms.client.get("/idempotency/k1", headers=ALICE)
    assert lookup.json() == {"key": "k1", "state": "applied", "status_code": 201, "response": created.json()}


async def test_keys_are_scoped_to_the_org(rooms: Running[RoomsService]) -> None:
    """Another org can neither look up an acme key nor collide with it: the same key books independently."""
    await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("shared"))
    lookup = await rooms.client.get("/idempotency/shared", headers=HANK)
    other_slot = DESIGN_REVIEW | {"start": "15:00", "end": "16:00"}
    theirs = await rooms.client.post("/bookings", json=other_slot, headers=HANK | key("shared"))
    assert (lookup.status_code, lookup.json()) == (404, {"error": "not_found", "state": "unknown"})
    assert (theirs.status_code, theirs.json()["org"]) == (201, "globex")


async def test_keys_are_forgotten_after_their_ttl(rooms: Running[RoomsService]) -> None:
    """Once the TTL has passed the key is unknown, and the same request runs again as a new one."""
    await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    rooms.clock.advance(rooms.key_ttl_seconds - 1)
    still_known = await rooms.client.get("/idempotency/k1", headers=ALICE)
    rooms.clock.advance(1)
    forgotten = await rooms.client.get("/idempotency/k1", headers=ALICE)
    rerun = await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    assert still_known.json()["state"] == "applied"
    assert (forgotten.status_code, forgotten.json()["state"]) == (404, "unknown")
    assert (rerun.status_code, rerun.json()) == (409, {"error": "slot_taken"})
    assert "idempotent-replayed" not in rerun.headers


async def test_cancelling_own_booking_cancels_it_once(rooms: Running[RoomsService]) -> None:
    """A cancel is idempotent under its key; a new cancel of a cancelled booking is refused 409."""
    first = await rooms.client.post("/bookings/bk-0001/cancel", headers=ALICE | key("c1"))
    replay = await rooms.client.post("/bookings/bk-0001/cancel", headers=ALICE | key("c1"))
    again = await rooms.client.post("/bookings/bk-0001/cancel", headers=ALICE | key("c2"))
    assert (first.status_code, first.json()) == (200, {"booking_id": "bk-0001", "status": "cancelled"})
    assert replay.headers["idempotent-replayed"] == "true"
    assert (again.status_code, again.json()) == (409, {"error": "already_cancelled"})
    assert rooms.service.bookings["bk-0001"].status == "cancelled"


async def test_cancelling_a_colleagues_booking_answers_not_found(rooms: Running[RoomsService]) -> None:
    """Only the person who booked may cancel; to anyone else the booking does not exist."""
    response = await rooms.client.post("/bookings/bk-0001/cancel", headers=BOB | key("c1"))
    assert (response.status_code, response.json()) == (404, {"error": "not_found"})
    assert rooms.service.bookings["bk-0001"].status == "active"


async def test_request_log_records_method_path_and_lowercased_headers(rooms: Running[RoomsService]) -> None:
    """Every request is recorded as received, refused ones included, and ``/_requests`` lists the log."""
    async with httpx.AsyncClient(base_url=rooms.url) as anonymous:
        await anonymous.get("/rooms", headers={"X-Agent-Token": "agent-secret"})
    await rooms.client.get("/rooms", headers=ALICE)
    refused, admitted = list(rooms.service.requests)
    listed = (await rooms.client.get("/_requests")).json()["requests"]
    assert (refused.method, refused.path, refused.headers["x-agent-token"]) == ("GET", "/rooms", "agent-secret")
    assert admitted.headers["x-countersign-subject"] == "alice@acme.example"
    assert admitted.headers["authorization"] == f"Bearer {rooms.token}"
    assert all(name == name.lower() for name in admitted.headers)
    assert [(r["method"], r["path"]) for r in listed] == [("GET", "/rooms"), ("GET", "/rooms"), ("GET", "/_requests")]
    assert listed[1]["headers"] == dict(admitted.headers)


async def test_clearing_the_request_log_empties_it(rooms: Running[RoomsService]) -> None:
    """``DELETE /_requests`` lets a test start counting from zero."""
    await rooms.client.get("/rooms", headers=ALICE)
    response = await rooms.client.delete("/_requests")
    assert response.json() == {"requests": []}
    assert len(rooms.service.requests) == 0


async def test_unknown_path_and_method_answer_in_the_error_shape(rooms: Running[RoomsService]) -> None:
    """Routing errors use ``{"error": ...}`` too, so nothing answers in another format."""
    unknown = await rooms.client.get("/nowhere", headers=ALICE)
    wrong_method = await rooms.client.delete("/rooms", headers=ALICE)
    assert (unknown.status_code, unknown.json()) == (404, {"error": "not_found"})
    assert (wrong_method.status_code, wrong_method.json()) == (405, {"error": "method_not_allowed"})


async def test_each_app_starts_from_its_own_copy_of_the_demo_data(rooms: Running[RoomsService]) -> None:
    """A booking in one app leaves a second app's bookings untouched."""
    other = create_rooms_app(service_token="t", signing_key=TEST_SIGNING_KEY)
    await rooms.client.post("/bookings", json=DESIGN_REVIEW, headers=ALICE | key("k1"))
    assert (len(rooms.service.bookings), len(other.state.service.bookings)) == (8, 7)


def test_an_empty_service_token_is_refused_at_construction() -> None:
    """An empty token would let any bearer in, so the factory refuses it."""
    with pytest.raises(ValueError):
        create_rooms_app(service_token="", signing_key=TEST_SIGNING_KEY)
