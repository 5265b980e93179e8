"""Readiness: can this gateway do its job now? (``/readyz``; ``/healthz`` only says the process answers.)

Who calls it: the ``/readyz`` endpoint, on every probe. Each check names what failed in words an
operator can act on; the endpoint answers 503 with them when any fails:

* ``redis``: the ledger's Redis answers a PING;
* ``ledger``: it is durable (AOF on, no eviction), checked afresh, so writes are allowed;
* ``audit``: the audit stream takes appends (the server is a primary with memory left) and the
  archive directory is writable;
* ``adapters``: every configured backend answers its health check (from the periodic checks);
* ``worker``: the in-process worker is running, when this process runs one.

A Redis that cannot be reached fails ``redis`` and skips the checks that need it, so a probe costs at
most the Redis timeouts once. It reads nothing an agent sent and writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.errors import StoreUnavailableError
from gateway.ops.health import AdapterHealth
from gateway.store.client import Connection
from gateway.store.durability import LedgerGuard
from gateway.store.probes import LedgerProbe

__all__ = ["Readiness", "ReadinessReport"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ReadinessReport:
    ready: bool
    checks: dict[str, dict[str, Any]]
    """Per check: ``ok`` and, when not, ``reason``; ``adapters`` also names each adapter's verdict."""

    def to_json(self) -> dict[str, Any]:
        return {"ready": self.ready, "checks": self.checks}


class Readiness:
    """The checks of one gateway process."""

    def __init__(
        self,
        *,
        redis: Connection,
        guard: LedgerGuard,
        probe: LedgerProbe,
        archive_dir: Path,
        adapters: AdapterHealth,
        worker_running: Callable[[], bool] | None,
    ) -> None:
        self._redis = redis
        self._guard = guard
        self._probe = probe
        self._archive_dir = archive_dir
        self._adapters = adapters
        self._worker_running = worker_running

    async def check(self) -> ReadinessReport:
        checks: dict[str, dict[str, Any]] = {}
        try:
            await self._redis.ping()
            checks["redis"] = {"ok": True}
        except StoreUnavailableError as error:
            checks["redis"] = _failed(f"Redis does not answer ({error.cause})")
        if checks["redis"]["ok"]:
            durable = await self._guard.check()
            checks["ledger"] = {"ok": True} if durable else _failed("; ".join(self._guard.problems))
            try:
                audit = await self._probe.audit_problem()
            except StoreUnavailableError as error:
                audit = f"Redis failed ({error.cause})"
        else:
            checks["ledger"] = _failed("skipped: Redis does not answer")
            audit = "skipped: Redis does not answer"
        archive = _unwritable(self._archive_dir)
        problems = [problem for problem in (audit, archive) if problem]
        checks["audit"] = _failed("; ".join(problems)) if problems else {"ok": True}
        verdicts = self._adapters.report()
        down = sorted(name for name, healthy in verdicts.items() if not healthy)
        checks["adapters"] = {"ok": not down, "adapters": verdicts}
        if down:
            checks["adapters"]["reason"] = f"unhealthy: {', '.join(down)}"
        if self._worker_running is not None:
            running = self._worker_running()
            checks["worker"] = {"ok": True} if running else _failed("the in-process worker is not running")
        return ReadinessReport(ready=all(check["ok"] for check in checks.values()), checks=checks)


def _failed(reason: str) -> dict[str, Any]:
    return {"ok": False, "reason": reason}


def _unwritable(directory: Path) -> str | None:
    """Why the archiver could not write into `directory` (made on first archive if missing), or None."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return f"audit archive directory {directory} is not writable"
    return None
