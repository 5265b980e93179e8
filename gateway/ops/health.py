"""Which backends answer their health check: an unhealthy adapter's reads fail fast and its
approved cards wait (the executor asks `healthy`; the composition root polls `check_once`).

Redis is not one of these backends: without it nothing is served at all, reads included, since no
caller can be authenticated or audited (ARCHITECTURE invariant 7; `gateway.auth.bearer`,
`gateway.executor.agent`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from gateway.errors import UpstreamError
from gateway.tools.upstream import UpstreamClient

__all__ = ["AdapterHealth"]

logger = logging.getLogger(__name__)


class AdapterHealth:
    """Which backends answer their health check. Unknown adapters count as healthy."""

    def __init__(
        self,
        clients: Mapping[str, UpstreamClient],
        paths: Mapping[str, str],
        *,
        failures_to_trip: int = 2,
        intervals: Mapping[str, float] | None = None,
    ) -> None:
        """`intervals` holds, per adapter, the fewest seconds between two of its checks (a registered adapter's
        ``health_interval_seconds``: a real API is not asked every poll); an adapter not in it is checked on
        every `check_once`."""
        self._clients = clients
        self._paths = paths
        self._intervals = intervals if intervals is not None else {}
        self._checked: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._trip = failures_to_trip

    def healthy(self, adapter: str) -> bool:
        return self._failures.get(adapter, 0) < self._trip

    def report(self) -> dict[str, bool]:
        return {name: self.healthy(name) for name in self._paths}

    async def check_once(self) -> None:
        for name, path in list(self._paths.items()):
            client = self._clients.get(name)
            if client is None:
                continue
            now = time.monotonic()
            if name in self._checked and now - self._checked[name] < self._intervals.get(name, 0.0):
                continue
            self._checked[name] = now
            try:
                ok = (await client.request("GET", path, timeout=2.0)).status == 200
            except UpstreamError:
                ok = False
            before = self.healthy(name)
            self._failures[name] = 0 if ok else self._failures.get(name, 0) + 1
            if before != self.healthy(name):
                logger.warning("adapter %s is now %s", name, "healthy" if ok else "unhealthy")
