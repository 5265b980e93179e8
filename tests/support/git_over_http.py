"""mcp-server-git's own server (``mcp_server_git.server.create_server``) served over Streamable HTTP by the MCP SDK it
ships with, for the upstream tests: the pinned package exposes stdio only, and its SDK (2.x) serves both protocol
eras over HTTP, the 2025-11-25 handshake with a session and the 2026-07-28 stateless requests.

Run with the git server's own interpreter: ``python git_over_http.py PORT REPOSITORY HEADERS_FILE [SESSIONS_FILE]``.
Each request's ``Authorization`` header (or ``-`` when there is none) is appended to HEADERS_FILE as one line, so a
test can see which credentials reached the server, and its ``Mcp-Session-Id`` (or ``-``) to SESSIONS_FILE when one
is named, so a test can count and end sessions; nothing else is added to the server or its transport.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import uvicorn
from mcp_server_git.server import create_server


def main(port: str, repository: str, headers_file: str, sessions_file: str = "") -> None:
    app = create_server(Path(repository)).streamable_http_app(streamable_http_path="/mcp")

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or ())
            with open(headers_file, "a", encoding="utf-8") as out:
                out.write(headers.get(b"authorization", b"-").decode("latin-1") + "\n")
            if sessions_file:
                with open(sessions_file, "a", encoding="utf-8") as out:
                    out.write(headers.get(b"mcp-session-id", b"-").decode("latin-1") + "\n")
        await app(scope, receive, send)

    # A client's open event stream (the 2025-11-25 era's GET) would hold a graceful shutdown for as long as the client
    # keeps it: a test that stops the server means it gone, so open connections get one second.
    uvicorn.run(recording, host="127.0.0.1", port=int(port), log_level="warning", timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
