"""The rooms service: meeting rooms in a building that ``acme`` and ``globex`` share, and their bookings.

Who sees what:

* Rooms and their availability are shared: both orgs see every active booking of a room, including
  other orgs' titles, which are free text and may be hostile.
* A booking as an object (``GET /bookings/{id}``) belongs to its org; to any other org it does not exist.
* Only the person who booked may cancel; for anyone else the booking does not exist.
* Availability names the building's ``today`` (fixed in the demo data, as the orders service's is), so
  a client can tell a day that is over from one that is not.

Writes (``POST /bookings``, ``POST /bookings/{id}/cancel``) follow the idempotency contract of
``backends._idempotency``; refusals (``slot_taken``, ``already_cancelled``, ``not_found``) are remembered.
Auth, identity headers, faults and the request log are the service shell's (``backends._common``).
Given a ``state_file``, the bookings and idempotency records outlive the process (``backends._persist``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import date
from functools import partial
from typing import Annotated, Any, Unpack

from pydantic import ConfigDict, Field, TypeAdapter, with_config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from backends._common import ServiceOptions, ServiceState, build_service_app, in_callers_org, next_free_id
from backends._http import Caller, caller_of, error, not_found
from backends._idempotency import Clock, Outcome
from backends._persist import StateFile
from backends.demo_data import Booking, RoomsData, demo_rooms_data

OPEN, CLOSE = "08:00", "18:00"
_HHMM = re.compile(r"(?:[01]\d|2[0-3]):[0-5]\d")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@with_config(ConfigDict(extra="forbid"))
@dataclass(frozen=True, kw_only=True, slots=True)
class NewBooking:
    """Body of ``POST /bookings``."""

    room_id: str
    date: str
    start: str
    end: str
    title: Annotated[str, Field(min_length=1, max_length=200)]


@with_config(ConfigDict(extra="forbid"))
@dataclass(frozen=True, kw_only=True, slots=True)
class NoArgs:
    """Body of writes that take none: empty or ``{}``."""


class RoomsService(ServiceState):
    """The rooms app's state: the rooms, every booking by id, plus the shared service state."""

    def __init__(
        self, *, data: RoomsData, key_ttl_seconds: float, clock: Clock, state_file: StateFile | None = None
    ) -> None:
        super().__init__(key_ttl_seconds=key_ttl_seconds, clock=clock, state_file=state_file)
        self.rooms = {room.id: room for room in data.rooms}
        self.bookings: dict[str, Booking] = {booking.booking_id: booking for booking in data.bookings}
        self.today = data.today
        self.load_saved()

    def business_state(self) -> dict[str, Any]:
        return {"bookings": [asdict(booking) for booking in self.bookings.values()]}

    def restore_business_state(self, state: Mapping[str, Any]) -> None:
        self.bookings = {raw["booking_id"]: Booking(**raw) for raw in state["bookings"]}

    def book(self, caller: Caller, params: Mapping[str, Any], args: NewBooking) -> Outcome:
        if not (_valid_date(args.date) and _valid_slot(args.start, args.end)):
            return Outcome.refused(400, "invalid_request")
        if args.room_id not in self.rooms:
            return Outcome.refused(404, "not_found")
        if any(_overlaps(other, args) for other in self.bookings.values()):
            return Outcome.refused(409, "slot_taken")
        booking = Booking(
            booking_id=next_free_id("bk-{:04d}", first=1, taken=self.bookings),
            room_id=args.room_id,
            date=args.date,
            start=args.start,
            end=args.end,
            title=args.title,
            booked_by=caller.subject,
            org=caller.org,
        )
        self.bookings[booking.booking_id] = booking
        return Outcome(status_code=201, body=_booking_json(booking))

    def cancel(self, caller: Caller, params: Mapping[str, Any], args: NoArgs) -> Outcome:
        booking = in_callers_org(self.bookings, caller, params["booking_id"])
        if booking is None or booking.booked_by != caller.subject:
            return Outcome.refused(404, "not_found")
        if booking.status == "cancelled":
            return Outcome.refused(409, "already_cancelled")
        self.bookings[booking.booking_id] = replace(booking, status="cancelled")
        return Outcome(status_code=200, body={"booking_id": booking.booking_id, "status": "cancelled"})


def create_rooms_app(*, data: RoomsData | None = None, **options: Unpack[ServiceOptions]) -> Starlette:
    """Build a rooms service from its own copy of ``data`` (the demo data by default), its bookings
    replaced by those a ``state_file`` holds; `options` are `build_service_app`'s (audience ``rooms`` by default),
    and so is what it raises. ``app.state.service`` is a :class:`RoomsService`."""
    seed = demo_rooms_data() if data is None else data
    return build_service_app(partial(RoomsService, data=seed), _routes, name="rooms", **options)


def _routes(service: RoomsService) -> list[BaseRoute]:
    async def list_rooms(request: Request) -> Response:
        rooms = [{"id": r.id, "name": r.name, "floor": r.floor, "capacity": r.capacity} for r in service.rooms.values()]
        return JSONResponse({"rooms": rooms})

    async def availability(request: Request) -> Response:
        room_id = request.path_params["room_id"]
        if room_id not in service.rooms:
            return not_found()
        day = request.query_params.get("date", "")
        if not _valid_date(day):
            return error(400, "invalid_date")
        taken = sorted(
            (b for b in service.bookings.values() if b.room_id == room_id and b.date == day and b.status == "active"),
            key=lambda b: b.start,
        )
        slots = [_pick(_booking_json(b), _SLOT_FIELDS) for b in taken]
        calendar = {"open": OPEN, "close": CLOSE, "today": service.today.isoformat()}
        return JSONResponse({"room_id": room_id, "date": day, **calendar, "bookings": slots})

    async def my_bookings(request: Request) -> Response:
        caller = caller_of(request)
        mine = sorted(
            (b for b in service.bookings.values() if b.booked_by == caller.subject and b.org == caller.org),
            key=lambda b: (b.date, b.start),
        )
        return JSONResponse({"bookings": [_pick(_booking_json(b), _MINE_FIELDS) for b in mine]})

    async def get_booking(request: Request) -> Response:
        booking = in_callers_org(service.bookings, caller_of(request), request.path_params["booking_id"])
        return not_found() if booking is None else JSONResponse(_booking_json(booking))

    return [
        Route("/rooms", list_rooms, methods=["GET"]),
        Route("/rooms/{room_id}/availability", availability, methods=["GET"]),
        Route("/bookings/mine", my_bookings, methods=["GET"]),
        Route("/bookings", service.write_endpoint(_NEW_BOOKING, service.book), methods=["POST"]),
        Route("/bookings/{booking_id}", get_booking, methods=["GET"]),
        Route("/bookings/{booking_id}/cancel", service.write_endpoint(_NO_ARGS, service.cancel), methods=["POST"]),
    ]


_NEW_BOOKING = TypeAdapter(NewBooking)
_NO_ARGS = TypeAdapter(NoArgs)
_SLOT_FIELDS = ("booking_id", "start", "end", "title", "booked_by", "org")
_MINE_FIELDS = ("booking_id", "room_id", "date", "start", "end", "title", "status")


def _booking_json(booking: Booking) -> dict[str, str]:
    return {
        "booking_id": booking.booking_id,
        "room_id": booking.room_id,
        "date": booking.date,
        "start": booking.start,
        "end": booking.end,
        "title": booking.title,
        "booked_by": booking.booked_by,
        "org": booking.org,
        "status": booking.status,
    }


def _pick(fields: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    return {name: fields[name] for name in names}


def _valid_date(text: str) -> bool:
    if not _ISO_DATE.fullmatch(text):
        return False
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _valid_slot(start: str, end: str) -> bool:
    # Zero-padded HH:MM strings order like the times they name, so plain comparison is enough.
    return bool(_HHMM.fullmatch(start) and _HHMM.fullmatch(end)) and OPEN <= start < end <= CLOSE


def _overlaps(booking: Booking, wanted: NewBooking) -> bool:
    return (
        booking.status == "active"
        and booking.room_id == wanted.room_id
        and booking.date == wanted.date
        and booking.start < wanted.end
        and wanted.start < booking.end
    )
