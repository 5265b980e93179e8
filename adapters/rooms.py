"""Meeting rooms: the read tools of the rooms backend.

Other people's booking titles and names are third-party text (`Untrusted`): the model learns
that a slot is taken, never what someone wrote about it. The caller's own bookings are not
third-party text and are shown as they are.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from adapters._upstream import path, request_json
from gateway.context import ToolContext
from gateway.tool import Access, Mode, Tool
from gateway.untrusted import Untrusted

__all__ = ["TOOLS"]

_ROOM_ID = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$", description="Room id, as rooms_list gives it.")


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoArguments(_Closed):
    pass


class AvailabilityArgs(_Closed):
    room_id: str = _ROOM_ID
    date: dt.date = Field(description="Day to check, YYYY-MM-DD.")


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


async def _list_rooms(args: NoArguments, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", "/rooms")


async def _availability(args: AvailabilityArgs, ctx: ToolContext) -> Any:
    url = path("/rooms/{room_id}/availability", room_id=args.room_id)
    return await request_json(ctx, "GET", url, params={"date": args.date.isoformat()})


async def _my_bookings(args: NoArguments, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", "/bookings/mine")


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
    return {
        "room_id": day.room_id,
        "date": day.date,
        "open": day.open,
        "close": day.close,
        "taken": [{"start": s.start, "end": s.end} for s in sorted(day.bookings, key=lambda s: s.start)],
        "free": _free_slots(day),
    }


def _availability_for_people(day: Availability) -> str:
    lines = [f"{day.room_id} on {day.date} ({day.open}-{day.close})"]
    lines += [f"  {s.start}-{s.end}  {s.title}  ({s.booked_by}, {s.org})" for s in day.bookings]
    return "\n".join(lines)


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="rooms_list",
        adapter="rooms",
        title="List meeting rooms",
        description="List the meeting rooms of the building with their floor and capacity.",
        mode=Mode.READ,
        arguments=NoArguments,
        output=RoomList,
        access=Access.public_(),
        execute=_list_rooms,
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
        access=Access.public_(),
        execute=_availability,
        model_view=_availability_for_model,
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
        access=Access.roles("staff"),
        execute=_my_bookings,
    ),
)
