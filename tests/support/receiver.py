"""A real webhook receiver for notification tests: Starlette under uvicorn, recording every request.

It answers 503 to the first `fail_first` requests and 200 after; while `hold` is set it holds each
request open (bounded), standing in for a receiver that is down without refusing connections.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

HOLD_LIMIT_SECONDS = 20.0


@dataclass(frozen=True, slots=True)
class Received:
    headers: dict[str, str]
    body: str
    status: int
    at: float
    """`time.monotonic()` when it arrived."""


@dataclass
class Receiver:
    fail_first: int = 0
    hold: threading.Event = field(default_factory=threading.Event)
    received: list[Received] = field(default_factory=list)

    def app(self) -> Starlette:
        async def hook(request: Request) -> Response:
            body = (await request.body()).decode()
            deadline = time.monotonic() + HOLD_LIMIT_SECONDS
            while self.hold.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            status = 503 if len(self.received) < self.fail_first else 200
            self.received.append(Received(dict(request.headers), body, status, time.monotonic()))
            return Response(status_code=status)

        return Starlette(routes=[Route("/hook", hook, methods=["POST"])])
