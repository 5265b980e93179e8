"""Meeting rooms: the read tools of the rooms backend, and booking and cancelling as write tools.

Other people's booking titles and names are third-party text (`Untrusted`): the model learns
that a slot is taken, never what someone wrote about it. The caller's own bookings are not
third-party text and are shown as they are.

The writes only ever run from an approved card, with the card's key as ``Idempotency-Key``; the
backend keeps a record per key, which `keyed_contract` reads when an answer was lost. A booking
title is the agent's own words: approvers see it marked as such, and no summary quotes it. A booking
proposal reads the room's day first (`_booking_preview`): the approver sees the room and the slot,
and a slot that is taken, or a day that is over, makes no card.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway import (
    Access,
    Approval,
    Mode,
    Preview,
    Tool,
    ToolContext,
    Untrusted,
    UpstreamNotFoundError,
    UpstreamProtocolError,
    fill_path,
    keyed_contract,
    request_json,
)

__all__ = ["TOOLS"]

_ROOM_ID = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$", description="Room id, as rooms_list gives it.")
_HHMM = r"^(?:[01][0-9]|2[0-3]):[0-5][0-9]$"


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoArguments(_Closed):
    pass


class AvailabilityArgs(_Closed):
    room_id: str = _ROOM_ID
    date: dt.date = Field(description="Day to check, YYYY-MM-DD.")


class BookArgs(_Closed):
    room_id: str = _ROOM_ID
    date: dt.date = Field(description="Day of the meeting, YYYY-MM-DD.")
    start: str = Field(pattern=_HHMM, description="Start time, HH:MM (24 h).")
    end: str = Field(pattern=_HHMM, description="End time, HH:MM (24 h), after start.")
    title: str = Field(min_length=1, max_length=120, description="Meeting title, shown to the approver.")

    @model_validator(mode="after")
    def _start_before_end(self) -> BookArgs:
        # Zero-padded HH:MM strings order like the times they name.
        if not self.start < self.end:
            raise ValueError("start must be before end")
        return self


class CancelArgs(_Closed):
    booking_id: str = Field(pattern=r"^bk-[0-9]{1,8}$", description="Id of one of your bookings, e.g. bk-0001.")


# Output strings are third-party text unless declared trusted by a pattern (`gateway.untrusted`).
_ID = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")
_BOOKING_ID = Field(pattern=r"^bk-[0-9]{1,8}$")
_TIME = Field(pattern=_HHMM)
_DAY = Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_NAME = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 .-]{0,39}$")
"""A room's name as the building's own directory gives it: one short line of letters and digits."""
_OWN_TITLE = Field(pattern=r"^[^\x00-\x1f\x7f]{1,120}$")
"""The caller's own booking title: its own words, one line as `rooms_book` accepted them, not a third party's."""


class Room(BaseModel):
    id: str = _ID
    name: str = _NAME
    floor: int
    capacity: int


class RoomList(BaseModel):
    rooms: list[Room]


class Slot(BaseModel):
    booking_id: str = _BOOKING_ID
    start: str = _TIME
    end: str = _TIME
    title: Untrusted
    booked_by: Untrusted
    org: str = _ID


class Availability(BaseModel):
    room_id: str = _ID
    date: str = _DAY
    open: str = _TIME
    close: str = _TIME
    bookings: list[Slot]
    today: dt.date | None = None
    """The building's calendar day, when the backend names it: earlier days are over."""


class Span(BaseModel):
    start: str
    end: str


class AvailabilityForModel(BaseModel):
    """What the model is shown of a room's day: when it is taken and free, never who booked it."""

    room_id: str
    date: str
    open: str
    close: str
    taken: list[Span]
    free: list[Span]


class MyBooking(BaseModel):
    booking_id: str = _BOOKING_ID
    room_id: str = _ID
    date: str = _DAY
    start: str = _TIME
    end: str = _TIME
    title: str = _OWN_TITLE
    status: str = Field(pattern=r"^[a-z_]{1,32}$")


class MyBookings(BaseModel):
    bookings: list[MyBooking]


class Cancelled(BaseModel):
    booking_id: str = _BOOKING_ID
    status: str = Field(pattern=r"^[a-z_]{1,32}$")


async def _list_rooms(args: NoArguments, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", "/rooms")


async def _availability(args: AvailabilityArgs, ctx: ToolContext) -> Any:
    url = fill_path("/rooms/{room_id}/availability", room_id=args.room_id)
    return await request_json(ctx, "GET", url, params={"date": args.date.isoformat()})


async def _my_bookings(args: NoArguments, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", "/bookings/mine")


def _earliest_open_day(now: dt.datetime) -> dt.date:
    """Without the backend's own today: the earliest day that has not ended everywhere (today at UTC-12,
    the last zone to start it)."""
    return (now.astimezone(dt.UTC) - dt.timedelta(hours=12)).date()


async def _booking_preview(args: BookArgs, ctx: ToolContext) -> Preview:
    """The room, the slot, and what else is booked in that room that day, by time only.

    An unknown room is NOT_FOUND. A slot that overlaps an active booking, or a day that has ended
    in every time zone, is infeasible: the backend would refuse the first, and nobody can meet on
    the second. Other people's titles are not read into the preview: the times say enough.
    """
    # Both reads at once: a proposal waits for one backend round trip, not two.
    answers = await asyncio.gather(
        _list_rooms(NoArguments(), ctx),
        _availability(AvailabilityArgs(room_id=args.room_id, date=args.date), ctx),
        return_exceptions=True,  # both finish before either error is raised: no read is left running
    )
    for answer in answers:
        if isinstance(answer, BaseException):
            raise answer
    try:
        rooms = RoomList.model_validate(answers[0])
        day = Availability.model_validate(answers[1])
    except ValidationError as error:
        raise UpstreamProtocolError("unexpected rooms or availability", service=ctx.service) from error
    room = next((r for r in rooms.rooms if r.id == args.room_id), None)
    if room is None:
        raise UpstreamNotFoundError("no such room", service=ctx.service)
    taken = sorted((s for s in day.bookings), key=lambda s: s.start)
    overlaps = [s for s in taken if s.start < args.end and args.start < s.end]
    when = f"{args.date.isoformat()} {args.start}-{args.end}"
    lines = (
        f"Room {room.name} ({room.id}, floor {room.floor}, {room.capacity} seats)",
        f"Slot {when} (opening hours {day.open}-{day.close})",
        "Overlaps: " + (", ".join(f"{s.start}-{s.end} ({s.booking_id})" for s in overlaps) or "nothing"),
        "Also booked that day: " + (", ".join(f"{s.start}-{s.end}" for s in taken if s not in overlaps) or "nothing"),
    )
    facts = {
        "room_id": room.id,
        "room_name": room.name,
        "date": args.date.isoformat(),
        "start": args.start,
        "end": args.end,
        "overlaps": [s.booking_id for s in overlaps],
    }
    infeasible = None
    if args.date < (day.today or _earliest_open_day(dt.datetime.now(dt.UTC))):
        infeasible = f"{args.date.isoformat()} is in the past; choose a date from today on"
    elif not (day.open <= args.start and args.end <= day.close):
        infeasible = f"{room.id} can only be booked between {day.open} and {day.close}"
    elif overlaps:
        free = ", ".join(f"{s['start']}-{s['end']}" for s in _free_slots(day)) or "none"
        infeasible = f"{room.id} is already booked during {when}; free that day: {free}"
    return Preview(lines=lines, facts=facts, infeasible=infeasible)


async def _book(args: BookArgs, ctx: ToolContext) -> Any:
    return await request_json(ctx, "POST", "/bookings", json=args.model_dump(mode="json"))


async def _cancel_preview(args: CancelArgs, ctx: ToolContext) -> Preview:
    """The booking that would be cancelled: room, day and slot. Only the caller's own active bookings
    qualify; someone else's, a cancelled one and a missing one all answer NOT_FOUND alike."""
    try:
        mine = MyBookings.model_validate(await request_json(ctx, "GET", "/bookings/mine"))
    except ValidationError as error:
        raise UpstreamProtocolError("unexpected list of bookings", service=ctx.service) from error
    booking = next((b for b in mine.bookings if b.booking_id == args.booking_id and b.status == "active"), None)
    if booking is None:
        raise UpstreamNotFoundError("not among the caller's active bookings", service=ctx.service)
    facts = {
        "booking_id": booking.booking_id,
        "room_id": booking.room_id,
        "date": booking.date,
        "start": booking.start,
        "end": booking.end,
    }
    lines = (f"Cancel {booking.booking_id}: {booking.room_id} on {booking.date} {booking.start}-{booking.end}",)
    return Preview(lines=lines, facts=facts)


async def _cancel(args: CancelArgs, ctx: ToolContext) -> Any:
    return await request_json(ctx, "POST", fill_path("/bookings/{booking_id}/cancel", booking_id=args.booking_id))


def _free_slots(day: Availability) -> list[dict[str, str]]:
    free, cursor = [], day.open
    for slot in sorted(day.bookings, key=lambda s: s.start):
        if slot.start > cursor:
            free.append({"start": cursor, "end": slot.start})
        cursor = max(cursor, slot.end)
    if cursor < day.close:
        free.append({"start": cursor, "end": day.close})
    return free


def _availability_for_model(day: Availability) -> Mapping[str, Any]:
    """`AvailabilityForModel`'s JSON for `day`, built as plain data: every read runs it, and models built
    only to be dumped again are most of its cost (tests/tools/test_catalog.py holds every answer to the
    listed schema)."""
    taken = [{"start": s.start, "end": s.end} for s in sorted(day.bookings, key=lambda s: s.start)]
    return {
        "room_id": day.room_id,
        "date": day.date,
        "open": day.open,
        "close": day.close,
        "taken": taken,
        "free": _free_slots(day),
    }


def _availability_for_people(day: Availability) -> str:
    lines = [f"{day.room_id} on {day.date} ({day.open}-{day.close})"]
    lines += [f"  {s.start}-{s.end}  {s.title}  ({s.booked_by}, {s.org})" for s in day.bookings]
    return "\n".join(lines)


_APPROVAL = Approval(
    approver_role="approver", required=1, decide_within_seconds=24 * 3600.0, execute_within_seconds=3600.0
)
_STAFF = Access.roles("staff")


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="rooms_list",
        adapter="rooms",
        title="List meeting rooms",
        description="List the meeting rooms of the building with their floor and capacity.",
        mode=Mode.READ,
        arguments=NoArguments,
        output=RoomList,
        access=Access.public(),
        execute=_list_rooms,
        open_world=False,
        returns_private_data=False,  # the building's rooms: anyone in the org may see them
    ),
    Tool(
        name="rooms_availability",
        adapter="rooms",
        title="Room availability",
        description=(
            "Show when a meeting room is taken and free on one day. Use a room id from rooms_list. "
            "Who booked a slot and its title are not shown."
        ),
        mode=Mode.READ,
        arguments=AvailabilityArgs,
        output=Availability,
        access=Access.public(),
        execute=_availability,
        open_world=False,
        model_view=_availability_for_model,
        model_view_output=AvailabilityForModel,
        human_view=_availability_for_people,
        emits_untrusted_text=True,
        returns_private_data=False,  # the shared calendar: other people's titles are untrusted, not secret
    ),
    Tool(
        name="rooms_my_bookings",
        adapter="rooms",
        title="My bookings",
        description="List the caller's own room bookings, with their ids, times and titles.",
        mode=Mode.READ,
        arguments=NoArguments,
        output=MyBookings,
        access=_STAFF,
        execute=_my_bookings,
        open_world=False,
    ),
    Tool(
        name="rooms_book",
        adapter="rooms",
        title="Book a meeting room",
        description=(
            "Requests approval to book a meeting room; nothing happens until an administrator approves. "
            "Check rooms_availability first. Returns an approval card to follow, not a booking."
        ),
        mode=Mode.WRITE,
        arguments=BookArgs,
        output=MyBooking,
        access=_STAFF,
        execute=_book,
        # A booking only adds a reservation; it overwrites nothing.
        destructive=False,
        open_world=False,
        preview=_booking_preview,
        refusal_words={"slot_taken": "the slot was taken", "not_found": "the room no longer exists"},
        write_contract=keyed_contract("booking_id"),
        approval=_APPROVAL,
        summary=lambda args: f"Book {args.room_id} on {args.date.isoformat()} from {args.start} to {args.end}",
        agent_text_fields=frozenset({"title"}),
        visible_fields=frozenset({"title"}),  # the title is on the shared calendar
    ),
    Tool(
        name="rooms_cancel_booking",
        adapter="rooms",
        title="Cancel a booking",
        description=(
            "Requests approval to cancel one of your own active bookings; nothing happens until an "
            "administrator approves. Booking ids come from rooms_my_bookings."
        ),
        mode=Mode.WRITE,
        arguments=CancelArgs,
        output=Cancelled,
        access=_STAFF,
        execute=_cancel,
        destructive=True,
        open_world=False,
        preview=_cancel_preview,
        refusal_words={"already_cancelled": "the booking was already cancelled", "not_found": "the booking is gone"},
        write_contract=keyed_contract("booking_id"),
        approval=_APPROVAL,
        summary=lambda args: f"Cancel booking {args.booking_id}",
    ),
)
