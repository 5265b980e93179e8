"""The MCP servers the gateway fronts, connected for the life of the process and their reviewed tools served.

Who calls it: the app's lifespan (`fronting`). For each ``[upstreams.<name>]`` it starts the supervised
session (`gateway.upstreams.connection`), reads the upstream's tool list, and serves the tools whose
review still holds (`gateway.upstreams.tools`) through the live tool source; every tool held back is
logged with its reason and the hash a reviewer would pin. The list is read again every `poll_seconds`:
a tool whose definition changed upstream is quarantined from the next reading on, until a person
reviews it again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio

from gateway.config.upstreams import UpstreamSection
from gateway.errors import UpstreamError
from gateway.registry.live import LiveToolSource
from gateway.upstreams.connection import UpstreamConnection
from gateway.upstreams.review import definition_diff
from gateway.upstreams.tools import upstream_tools

__all__ = ["fronting"]

logger = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def fronting(
    upstreams: Mapping[str, UpstreamSection],
    live: LiveToolSource,
    *,
    secrets: Mapping[str, str],
    poll_seconds: float,
) -> AsyncIterator[dict[str, UpstreamConnection]]:
    """Connect every upstream and serve its reviewed tools while the block runs; stop them (and their
    children) on exit. Yields the connections by name."""
    connections = {name: UpstreamConnection(name, section, secrets=secrets) for name, section in upstreams.items()}
    async with contextlib.AsyncExitStack() as stack:
        for connection in connections.values():
            await stack.enter_async_context(connection.running())
        first = {name: await _serve(name, upstreams[name], c, live, None) for name, c in connections.items()}
        async with anyio.create_task_group() as group:
            for name, connection in connections.items():
                group.start_soon(_watch, name, upstreams[name], connection, live, poll_seconds, first[name])
            try:
                yield connections
            finally:
                group.cancel_scope.cancel()


async def _serve(
    name: str,
    section: UpstreamSection,
    connection: UpstreamConnection,
    live: LiveToolSource,
    last: Sequence[Mapping[str, Any]] | None,
) -> Sequence[Mapping[str, Any]] | None:
    """Read the upstream's list and serve what its review allows; the listing read (None: unread)."""
    try:
        listing = await connection.list_tools()
    except UpstreamError as error:
        logger.warning("upstream %s: tool list not read (%s); serving what was served", name, type(error).__name__)
        return last
    if listing == last:
        return last
    others = live.names_besides(name)
    tools, held = upstream_tools(name, listing, section.tools, connection, taken=others)
    before = {str(tool.get("name")): tool for tool in last or ()}
    now = {str(tool.get("name")): tool for tool in listing}
    for quarantined in held:
        logger.warning(
            "upstream %s: tool %s not served (%s); listed as %s, annotations (suggestions only) %s",
            name,
            quarantined.name,
            quarantined.reason,
            quarantined.listed_hash,
            dict(quarantined.suggestion),
        )
        if quarantined.reason == "changed" and quarantined.name in before:
            # What changed since the definition last read, for the reviewer (the upstream's text, as data).
            diff = definition_diff(before[quarantined.name], now[quarantined.name])
            logger.warning("upstream %s: tool %s changed:\n%s", name, quarantined.name, "\n".join(diff))
    await live.serve_upstream(name, tools)
    logger.info("upstream %s: serving %d reviewed tools, %d held back", name, len(tools), len(held))
    return listing


async def _watch(
    name: str,
    section: UpstreamSection,
    connection: UpstreamConnection,
    live: LiveToolSource,
    poll_seconds: float,
    last: Sequence[Mapping[str, Any]] | None,
) -> None:
    while True:
        await anyio.sleep(poll_seconds)
        last = await _serve(name, section, connection, live, last)
