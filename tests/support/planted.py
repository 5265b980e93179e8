"""A real HTTP service that answers whatever a test planted, and records the raw paths and headers it was sent.

Leak tests set `PlantedBackend.answer` (any status, any body) and call a tool against it; path tests read
`raw_paths`, the request targets exactly as they arrived on the wire (uvicorn's ``raw_path``), before any
server normalises them; identity tests read `requests`, each recorded path with the headers it came
with. ``GET /_health`` always answers 200, so the gateway's health check never depends on what was
planted.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.types import Receive, Scope, Send

from backends.serve import serve_app_in_thread

__all__ = ["PlantedBackend", "notes_detail_tool", "serve_planted"]


def notes_detail_tool() -> dict[str, Any]:
    """A manifest's public read tool ``notes_detail`` (``GET /notes/{note_id}/detail``), for a registered adapter
    in front of the planted backend; a fresh copy each call, for a test to vary."""
    note_id = {"type": "object", "properties": {"note_id": {"type": "string"}}}
    return {
        "name": "notes_detail",
        "description": "Show one note in detail.",
        "mode": "read",
        "method": "GET",
        "path": "/notes/{note_id}/detail",
        "input_schema": {**note_id, "required": ["note_id"], "additionalProperties": False},
        "output_schema": note_id,
        "access": {"public": True},
    }


class PlantedBackend:
    """An ASGI app: every request but the health check gets `answer`, and its raw path is recorded."""

    def __init__(self) -> None:
        self.answer: tuple[int, bytes] = (200, b"{}")
        self.headers: dict[str, str] = {}
        """Headers of the planted answer besides its content type (a 429's ``Retry-After``)."""
        self._lock = threading.Lock()
        self._seen: list[tuple[bytes, dict[str, str]]] = []
        self._queries: list[bytes] = []

    def plant(self, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        """Answer the next requests with `body` (JSON-encoded unless it is bytes), `status` and `headers`."""
        self.answer = (status, body if isinstance(body, bytes) else json.dumps(body).encode())
        self.headers = dict(headers or {})

    @property
    def raw_paths(self) -> list[bytes]:
        with self._lock:
            return [path for path, _headers in self._seen]

    @property
    def requests(self) -> list[tuple[bytes, dict[str, str]]]:
        """``(raw path, headers)`` of each recorded request; header names are lower case."""
        with self._lock:
            return [(path, dict(headers)) for path, headers in self._seen]

    @property
    def queries(self) -> list[bytes]:
        """The raw query string of each recorded request (``b""`` when it had none)."""
        with self._lock:
            return list(self._queries)

    def forget(self) -> None:
        with self._lock:
            self._seen.clear()
            self._queries.clear()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        raw: bytes = scope["raw_path"]
        extra: list[tuple[bytes, bytes]] = []
        if raw == b"/_health":
            status, body = 200, b"{}"
        else:
            headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
            with self._lock:
                self._seen.append((raw, headers))
                self._queries.append(scope.get("query_string", b""))
            status, body = self.answer
            extra = [(name.lower().encode(), value.encode()) for name, value in self.headers.items()]
        headers = [(b"content-type", b"application/json"), *extra]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@contextmanager
def serve_planted() -> Iterator[tuple[str, PlantedBackend]]:
    """Serve a fresh `PlantedBackend` on loopback; yield its base URL and the app."""
    app = PlantedBackend()
    with serve_app_in_thread(app) as url:
        yield url, app
