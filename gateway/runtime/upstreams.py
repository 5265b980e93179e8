"""The MCP servers the gateway fronts, connected for the life of the process and their reviewed tools served.

Who calls it: the app's lifespan and the separate worker (`fronting`). For each ``[upstreams.<name>]`` it starts
the supervised session (`gateway.upstreams.connection`), reads the upstream's tool list, and serves the tools
whose review still holds (`gateway.upstreams.tools`) through the live tool source. The reviews in force are the
config file's and those admins accepted through the gateway (`gateway.upstreams.tool_reviews`). What was listed,
and which tools are held back with why, is recorded for the review; every tool held back is also logged, with
the diff from the definition last served when it changed.

Upstreams services register through the registry API (`UpstreamReviews.register`) are connected at once in the
process that took the registration and from the next poll on in the others, their tools quarantined like every
other upstream's until reviewed. One registered again differently (a new URL, say) is connected to as registered
now, without a restart: the new sessions serve before the old ones are left, and the tools stay held to the
hashes their reviews pin, whichever server lists them. The list is read again when the upstream
says it changed (``notifications/tools/list_changed``), when a new session opens (a restarted server may be another
version), when an admin accepts a review in this process, and every `poll_seconds` (reviews accepted through another
process, servers that never notify). A tool whose definition changed upstream is quarantined from that reading on,
until a person reviews it again; the others stay served.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc

from gateway.config.upstreams import UpstreamSection
from gateway.errors import StoreUnavailableError, UpstreamError
from gateway.registry.live import LiveToolSource
from gateway.store.upstream_reviews import Listing
from gateway.tools.declarations import Tool
from gateway.upstreams.connection import UpstreamConnection
from gateway.upstreams.review import definition_diff
from gateway.upstreams.tool_reviews import UpstreamReviews
from gateway.upstreams.tools import upstream_tools

__all__ = ["fronting", "last_served_tools"]

logger = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def fronting(
    upstreams: Mapping[str, UpstreamSection],
    live: LiveToolSource,
    *,
    reviews: UpstreamReviews,
    secrets: Mapping[str, str],
    poll_seconds: float,
) -> AsyncIterator[dict[str, UpstreamConnection]]:
    """Connect every upstream and serve its reviewed tools while the block runs; stop them (and their
    children) on exit. The config file's `upstreams` are read once before the block starts; those services
    register later are connected within `poll_seconds`. Yields the connections by name (it grows)."""
    connections: dict[str, UpstreamConnection] = {}
    readers: dict[str, _Reader] = {}
    fronted: dict[str, tuple[UpstreamSection, anyio.CancelScope]] = {}
    registered = anyio.Event()

    async def accepted(upstream: str) -> None:
        if upstream in readers:
            readers[upstream].wake.set()
        registered.set()  # a registration (perhaps of a new URL) is read by `discover` now, not at the next poll

    reviews.on_change(accepted)

    async def front(
        name: str, section: UpstreamSection, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        connection = UpstreamConnection(name, section, secrets=secrets)
        reader = _Reader(name, connection, live, reviews)
        with anyio.CancelScope() as scope:
            fronted[name] = section, scope
            # Entered and left by this task: the SDK's client holds cancel scopes of the task that opened it.
            async with connection.running():
                replaced = readers.get(name)
                if replaced is not None:
                    # Registered again: from here on only this reader serves the name. The one it replaces may be
                    # reading its list right now (the acceptance woke it); served after this one, its tools would
                    # be bound to a connection about to close, and answer UPSTREAM_UNAVAILABLE until the next poll.
                    replaced.retired = True
                await reader.serve()
                connections[name], readers[name] = connection, reader
                task_status.started()
                await reader.run(poll_seconds)

    async def discover(group: anyio.abc.TaskGroup) -> None:
        nonlocal registered
        while True:
            with anyio.move_on_after(poll_seconds):
                await registered.wait()
            registered = anyio.Event()
            try:
                sections = await reviews.sections()
            except StoreUnavailableError as error:
                logger.warning("registered upstreams not read (%s); fronting them as they were", error)
                continue
            for name, section in sections.items():
                if name in upstreams or fronted.get(name, (None,))[0] == section:
                    continue
                before = fronted.get(name)
                if before is None:
                    logger.info("upstream %s registered by a service: connecting", name)
                    fronted[name] = section, anyio.CancelScope()  # taken until it runs
                    group.start_soon(front, name, section)
                    continue
                # Registered again, differently (another URL, credential, era or pool): the new server is connected
                # and its list read (its tools held to their reviews' hashes) before the old sessions are left, so
                # calls go to one server or the other, never to none while the new one connects.
                logger.info("upstream %s registered again by its service: connecting to it as registered now", name)
                replaced = connections.get(name)
                await group.start(front, name, section)
                # New calls take the new server's tools from here on; a call already made on the old server's is
                # let finish (bounded by the longest call timeout its reviews allow) rather than cancelled with its
                # session.
                longest = max((review.timeout_seconds for review in before[0].tools.values()), default=10.0)
                with anyio.move_on_after(longest):
                    while replaced is not None and replaced.in_flight:
                        await anyio.sleep(0.05)
                before[1].cancel()

    async with anyio.create_task_group() as group:
        for name, section in upstreams.items():
            await group.start(front, name, section)
        group.start_soon(discover, group)
        try:
            yield connections
        finally:
            group.cancel_scope.cancel()


async def last_served_tools(
    reviews: UpstreamReviews, *, secrets: Mapping[str, str], taken: Collection[str]
) -> list[Tool]:
    """The fronted servers' tools a gateway serves from the list it read last (recorded in the store) and the
    reviews in force now, as `_Reader.serve` builds them: what a process that does not connect to the servers
    (``countersign policy explain``) decides with. `taken`: the names served otherwise, which no tool shadows.

    The tools' connections are made and never opened: such a process lists and decides, it does not call.
    """
    served: list[Tool] = []
    names = set(taken)
    for name, section in (await reviews.sections()).items():
        listing = await reviews.store.listing(name)
        if listing is None:
            continue  # never read by a gateway: nothing of it is served
        in_force, _by = await reviews.in_force(name)
        connection = UpstreamConnection(name, section, secrets=secrets)
        tools, _held = upstream_tools(name, listing.tools, in_force, connection, taken=names)
        served += tools
        names.update(tool.name for tool in tools)
    return served


class _Reader:
    """Reads one upstream's list and serves what its reviews allow."""

    def __init__(
        self, name: str, connection: UpstreamConnection, live: LiveToolSource, reviews: UpstreamReviews
    ) -> None:
        self.name = name
        self.wake = anyio.Event()
        self._connection = connection
        self._live = live
        self._reviews = reviews
        self._listing: Sequence[Mapping[str, Any]] | None = None
        self._version: int | None = None
        self.retired = False
        """Set when a reader of the server as registered again takes over the name: this one serves nothing more."""

    async def run(self, poll_seconds: float) -> None:
        while True:
            with anyio.move_on_after(poll_seconds):
                async with anyio.create_task_group() as either:

                    async def first(event: anyio.Event) -> None:
                        await event.wait()
                        either.cancel_scope.cancel()

                    either.start_soon(first, self.wake)
                    either.start_soon(first, self._connection.list_changed)
            await self.serve()

    async def serve(self) -> None:
        """Read the list (and the review version) and serve what the reviews in force allow, if either changed."""
        name, connection = self.name, self._connection
        # Cleared before reading: a change announced while reading is read again next time.
        self.wake, connection.list_changed = anyio.Event(), anyio.Event()
        try:
            listing = await connection.list_tools()
            logger.debug("upstream %s: tool list read (%d tools)", name, len(listing))
            version = await self._reviews.store.version()
            if listing == self._listing and version == self._version:
                return
            in_force, _by = await self._reviews.in_force(name)
            tools, held = upstream_tools(name, listing, in_force, connection, taken=self._live.names_besides(name))
            seen = await self._reviews.store.seen(name)
            served = {tool.name for tool in tools}
            now = {str(definition.get("name")): definition for definition in listing}
            record = Listing(
                tools=listing,
                held={q.name: q.reason for q in held},
                protocol=connection.protocol_version or "",
                at_ms=int(time.time() * 1000),
            )
            await self._reviews.store.record_listing(name, record)
            await self._reviews.store.record_seen(name, {t: d for t, d in now.items() if f"{name}_{t}" in served})
        except UpstreamError as error:
            logger.warning("upstream %s: tool list not read (%s); serving what was served", name, type(error).__name__)
            return
        except StoreUnavailableError as error:
            logger.warning("upstream %s: reviews not read (%s); serving what was served", name, error)
            return
        for quarantined in held:
            logger.warning(
                "upstream %s: tool %s not served (%s); listed as %s, annotations (suggestions only) %s",
                name,
                quarantined.name,
                quarantined.reason,
                quarantined.listed_hash,
                dict(quarantined.suggestion),
            )
            if quarantined.reason == "changed" and quarantined.name in seen:
                # What changed since the definition last served, for the reviewer (the upstream's text, as data).
                diff = definition_diff(seen[quarantined.name], now[quarantined.name])
                logger.warning("upstream %s: tool %s changed:\n%s", name, quarantined.name, "\n".join(diff))
        if self.retired:  # checked with no await before the tools are put in place (`serve_upstream`)
            return
        await self._live.serve_upstream(name, tools)
        self._listing, self._version = listing, version
        logger.info("upstream %s: serving %d reviewed tools, %d held back", name, len(tools), len(held))
