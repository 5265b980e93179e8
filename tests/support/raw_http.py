"""One HTTP/1.1 exchange written byte for byte, for requests no client library would send.

httpx (h11) refuses header values with surrounding whitespace and folds the case of names, so the
edge cases of `gateway.mcp.edge` (two ``Authorization`` lines in any case, ``Mcp-Name:  x ``) are
written here as raw lines on a real socket to the real server.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio

ACCEPT = b"Accept: application/json, text/event-stream"
JSON = b"Content-Type: application/json"


@dataclass(frozen=True)
class RawAnswer:
    status: int
    headers: list[tuple[str, str]]
    """Names lowercased, in the order the server sent them."""
    body: bytes

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key == name), None)

    def json(self) -> Any:
        return json.loads(self.body)

    def sse_messages(self) -> list[Any]:
        """The JSON-RPC messages of an SSE answer (or the one message of a JSON answer)."""
        if self.header("content-type") == "application/json":
            return [self.json()]
        lines = self.body.decode().splitlines()
        return [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ") and line != "data: "]


async def exchange(url: str, method: str, lines: Sequence[bytes], body: bytes = b"") -> RawAnswer:
    """Send `method` to `url` with exactly these header `lines`, plus Host, Connection and (unless one of
    `lines` declares it) the body's Content-Length."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    head = [f"{method} {parts.path or '/'} HTTP/1.1".encode(), f"Host: {parts.netloc}".encode(), *lines]
    declared = any(line.lower().startswith(b"content-length:") for line in lines)
    if (body or method == "POST") and not declared:
        head.append(f"Content-Length: {len(body)}".encode())
    head.append(b"Connection: close")
    with anyio.fail_after(10):
        async with await anyio.connect_tcp(parts.hostname, parts.port) as stream:
            await stream.send(b"\r\n".join(head) + b"\r\n\r\n" + body)
            received = bytearray()
            try:
                while True:
                    received += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    return _parse(bytes(received))


def _parse(raw: bytes) -> RawAnswer:
    head, _, rest = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in header_lines:
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    if ("transfer-encoding", "chunked") in headers:
        rest = _unchunk(rest)
    return RawAnswer(status=int(status_line.split(" ")[1]), headers=headers, body=rest)


def _unchunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return bytes(out)
