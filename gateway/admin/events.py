"""``GET /admin/api/cards/events``: server-sent events, one per changed card of the admin's org.

Who calls it: the console keeps one open while it shows the list or a card, and updates what it
shows from each event; any client holding an admin key may follow it the same way. What it asks of
the card service: `CardService.watch`, which hears every card any gateway process or worker saves
(the ledger announces each save on Redis pub/sub) and yields those the admin may read, as list rows.

The stream (``text/event-stream``)::

    event: ready          once subscribed: load what you show now; every later change follows
    data: {}

    event: card           a card changed: the list row of the card as it is now (`AdminCardSummary`)
    data: {"card_id": ..., "state": ..., "version": ..., ...}

    : keep-alive          a comment every `HEARTBEAT_SECONDS`, so a dead connection is noticed

A stream ends after `STREAM_SECONDS` (and when Redis stops answering): the client reconnects, and
every reconnection passes the admin key check again, so a revoked key stops following within that
time. Nothing is kept for a client that is not connected; after ``ready`` it reloads instead.
The events carry the same fields as the card list, no more: no arguments, no agent text.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from gateway.admin.bodies import AdminError, AdminErrorDetail
from gateway.approvals.service import CardService
from gateway.auth.bearer import principal_of
from gateway.cards.views import ResultCode
from gateway.errors import StoreUnavailableError
from gateway.web.route_table import Endpoint

__all__ = ["HEARTBEAT_SECONDS", "STREAM_SECONDS", "card_events"]

HEARTBEAT_SECONDS = 15.0
STREAM_SECONDS = 300.0

_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}  # no proxy may hold the events back


def card_events(service: CardService) -> Endpoint:
    """The endpoint of the event stream (see the module docstring)."""

    async def endpoint(request: Request) -> Response:
        watching = contextlib.AsyncExitStack()
        try:
            watch = await watching.enter_async_context(service.watch(principal_of(request.scope)))
        except StoreUnavailableError as error:
            detail = AdminErrorDetail(code=ResultCode.LEDGER_UNAVAILABLE.value, message=f"no live updates: {error}")
            content = AdminError(error=detail).model_dump(mode="json")
            return JSONResponse(content, status_code=503, headers={"cache-control": "no-store"})

        async def events() -> AsyncIterator[str]:
            until = time.monotonic() + STREAM_SECONDS
            try:
                yield "retry: 2000\nevent: ready\ndata: {}\n\n"
                while (left := until - time.monotonic()) > 0:
                    row = await watch.next(min(HEARTBEAT_SECONDS, left))
                    if row is None:
                        yield ": keep-alive\n\n"
                        continue
                    yield f"event: card\ndata: {json.dumps(row.model_dump(mode='json'), separators=(',', ':'))}\n\n"
            except StoreUnavailableError:
                return  # the client reconnects, and reloads on the next ``ready``
            finally:
                # A client that goes away cancels the stream; the subscription's connection still goes back.
                with anyio.CancelScope(shield=True):
                    await watching.aclose()

        return StreamingResponse(events(), media_type="text/event-stream", headers=_HEADERS)

    return endpoint
