"""Meeting rooms: the read tools of the rooms backend, and booking and cancelling as write tools.

Other people's booking titles and names are third-party text (`Untrusted`): the model learns
that a slot is taken, never what someone wrote about it. The caller's own bookings are not
third-party text and are shown as they are.

The writes only ever run from an approved card, with the card's key as ``Idempotency-Key``; the
backend keeps a record per key, which `keyed_contract` reads when an answer was lost. A booking
title is the agent's own words: approvers see it marked as such, and no summary quotes it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway import (
    Access,
    Approval,
    Mode,
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


class Room(BaseModel):
    id: str
    name: str
    floor: int
    capacity: int


class RoomList(BaseModel):
    rooms: list[Room]


class Slot(BaseModel):
    booking_id: str
    start: str
    end: str
    title: Untrusted
    booked_by: Untrusted
    org: str


class Availability(BaseModel):
    room_id: str
    date: str
    open: str
    close: str
    bookings: list[Slot]


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
    booking_id: str
    room_id: str
    date: str
    start: str
    end: str
    title: str
    status: str


class MyBookings(BaseModel):
    bookings: list[MyBooking]


class Cancelled(BaseModel):
    booking_id: str
    status: str


async def _list_rooms(args: NoArguments, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", "/rooms")


async def _availability(args: AvailabilityArgs, ctx: ToolContext) -> Any:
    url = fill_path("/rooms/{room_id}/availability", room_id=args.room_id)
    return await request_json(ctx, "GET", url, params={"date": args.date.isoformat()})


async def _my_bookings(args: NoArguments, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", "/bookings/mine")


async def _room_exists(args: BookArgs, ctx: ToolContext) -> None:
    await _availability(AvailabilityArgs(room_id=args.room_id, date=args.date), ctx)


async def _book(args: BookArgs, ctx: ToolContext) -> Any:
    return await request_json(ctx, "POST", "/bookings", json=args.model_dump(mode="json"))


async def _own_active_booking(args: CancelArgs, ctx: ToolContext) -> None:
    try:
        mine = MyBookings.model_validate(await request_json(ctx, "GET", "/bookings/mine"))
    except ValidationError as error:
        raise UpstreamProtocolError("unexpected list of bookings", service=ctx.service) from error
    if not any(b.booking_id == args.booking_id and b.status == "active" for b in mine.bookings):
        # Someone else's booking, a cancelled one and a missing one answer alike.
        raise UpstreamNotFoundError("not among the caller's active bookings", service=ctx.service)


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
    return AvailabilityForModel(
        room_id=day.room_id,
        date=day.date,
        open=day.open,
        close=day.close,
        taken=[Span(start=s.start, end=s.end) for s in sorted(day.bookings, key=lambda s: s.start)],
        free=[Span(**slot) for slot in _free_slots(day)],
    ).model_dump(mode="json")


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
        preflight=_room_exists,
        write_contract=keyed_contract("booking_id"),
        approval=_APPROVAL,
        summary=lambda args: f"Book {args.room_id} on {args.date.isoformat()} from {args.start} to {args.end}",
        agent_text_fields=frozenset({"title"}),
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
        preflight=_own_active_booking,
        write_contract=keyed_contract("booking_id"),
        approval=_APPROVAL,
        summary=lambda args: f"Cancel booking {args.booking_id}",
    ),
)
