"""Fail closed: a ledger transition counts only once the store has confirmed it durable.

Who calls it: the ledger (`gateway.store.ledger.redis_ledger.RedisLedger._eval`) on every transition, and through
`LedgerGuard` the executor, the card service, the CLI and the composition root. A durable ledger keeps
every transition it acknowledged: the append-only file is on, nothing is evicted
(``maxmemory-policy noeviction``) and, on servers that have ``WAITAOF`` (Redis 7.2+, Valkey), the
transition is fsynced to the local AOF.

The contract, in two parts:

* **The gate, per transition** (`queue_confirmation`, `read_confirmation`): in the same pipeline as
  the script, hence the same round trip, the ledger sends ``SET <shard>:fsync`` (a barrier: a write of
  this connection after every write the server applied before it, from any connection), then
  ``WAITAOF 1 0 <ms>`` where the server has it, then ``CONFIG GET appendonly maxmemory-policy
  appendfsync`` (CONFIG cannot run inside a script; several names in one CONFIG GET need Redis 7.0 or
  later). The transition is confirmed when the AOF is on, no eviction policy is set, ``appendfsync`` is
  ``always`` or ``everysec``, and the fsync was confirmed.
  A server flipped to ``appendonly no`` or an eviction policy answers the very next transition as
  not durable: there is no window in which a cached verdict lets one through. Without ``WAITAOF``
  (Redis 7.0 and older) the check is the configuration at the moment of the transition, and an
  acknowledged transition is on disk as far as ``appendfsync`` promises (``always``: before the
  reply; ``everysec``: within a second, lost only if the machine, not the process, dies). Support
  for ``WAITAOF`` is learnt once per server with ``COMMAND INFO`` (`has_waitaof`), never by matching
  an error on each call.
* **The pre-check, cached** (`LedgerGuard`): "is the ledger known not to be durable?", so that a
  proposal or decision the gate would refuse writes nothing at all. Its verdict follows every
  transition's confirmation (`LedgerGuard.observe`) and is re-checked every `interval_seconds` while
  durable and every `retry_seconds` while not. It is never the gate on its own.

A server that refuses ``CONFIG GET`` (renamed, disabled, denied by ACL) cannot be verified, and is
not durable, in both parts alike. Any Redis error counts as "not writable" until a check succeeds.

What the configuration check cannot see: right after ``appendonly`` is switched back on, the server
rewrites its AOF from memory, and until that rewrite ends a crash would lose what it holds although
``CONFIG GET`` already says ``yes``. ``WAITAOF`` waits for the rewrite; without it (Redis 7.0) a
transition confirmed in those moments (milliseconds for a small ledger) is only as safe as the
rewrite.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError

from gateway.store.client import routes

__all__ = [
    "DurabilityReport",
    "LedgerGuard",
    "check_durability",
    "config_value",
    "durability_problems",
    "eval_confirmed",
    "has_waitaof",
    "queue_confirmation",
    "read_confirmation",
]

logger = logging.getLogger(__name__)

_CONFIG = ("appendonly", "maxmemory-policy", "appendfsync")


@dataclass(frozen=True, kw_only=True, slots=True)
class DurabilityReport:
    """Whether a server keeps every acknowledged write; the gateway refuses writes when it does not."""

    durable: bool
    """True exactly when `problems` is empty."""
    problems: tuple[str, ...] = ()
    """Operator-readable reasons, e.g. ``"appendonly is off"``."""

    def __post_init__(self) -> None:
        if self.durable == bool(self.problems):
            raise ValueError("a durability report is durable exactly when it lists no problems")

    @classmethod
    def of(cls, problems: Sequence[str]) -> DurabilityReport:
        return cls(durable=not problems, problems=tuple(problems))


def durability_problems(appendonly: str | None, policy: str | None, appendfsync: str | None) -> list[str]:
    """What keeps a server with this configuration from being durable (nothing: it is durable).

    ``appendfsync no`` leaves it to the operating system when the AOF reaches the disk: an acknowledged
    transition may be lost in a crash for as long as the kernel keeps it (tens of seconds). A server
    without ``WAITAOF`` (Redis 7.0) would confirm such a transition from its configuration alone, so the
    policy is read on every server, Redis 7.x and Valkey alike.
    """
    problems: list[str] = []
    if appendonly != "yes":
        problems.append("appendonly is off" if appendonly == "no" else f"appendonly is {appendonly!r}")
    if policy != "noeviction":
        problems.append(f"maxmemory-policy is {policy} (eviction on)")
    if appendfsync not in ("always", "everysec"):
        problems.append(f"appendfsync is {appendfsync} (the AOF reaches the disk when the OS decides)")
    return problems


async def check_durability(client: aioredis.Redis) -> DurabilityReport:
    """Report whether the server behind `client` is configured to keep every write it acknowledges.

    Durable means ``appendonly yes``, ``maxmemory-policy noeviction`` and ``appendfsync`` ``always`` or
    ``everysec``. A server that refuses
    ``CONFIG GET`` (renamed, disabled, or denied by ACL) cannot be verified and is reported as not
    durable.

    Raises:
        redis.ConnectionError: the server cannot be reached; that is not a durability verdict.
    """
    problems: list[str] = []
    # A Cluster is durable when every primary is: each owns the slots of some cards.
    for route in await routes(client):
        try:
            reply: Any = await client.execute_command("CONFIG", "GET", *_CONFIG, **route)  # type: ignore[no-untyped-call]
        except redis.ResponseError as exc:
            return DurabilityReport(durable=False, problems=(_unverifiable(exc),))
        found = durability_problems(*(config_value(_config_pairs(reply), name) for name in _CONFIG))
        problems += [problem for problem in found if problem not in problems]
    return DurabilityReport.of(problems)


async def has_waitaof(client: aioredis.Redis) -> bool:
    """Whether the server behind `client` has ``WAITAOF``, asked once with ``COMMAND INFO``.

    A server that refuses ``COMMAND`` is taken not to have it (then each transition is checked by
    its configuration only) and that is logged, since it weakens the confirmation.

    Raises:
        redis.ConnectionError: the server cannot be reached.
    """
    for route in await routes(client):  # on a Cluster, every primary must have it
        try:
            answer: Any = await client.execute_command("COMMAND INFO", "WAITAOF", **route)  # type: ignore[no-untyped-call]
        except redis.ResponseError as error:
            logger.warning("COMMAND INFO is refused (%s); transitions are confirmed without WAITAOF", error)
            return False
        if not answer or answer[0] is None:
            return False
    return True


async def eval_confirmed(
    client: aioredis.Redis,
    script: AsyncScript,
    keys: Sequence[str],
    args: Sequence[str | int],
    *,
    waitaof: bool,
    barrier_key: str,
    fsync_timeout_ms: int,
    min_replicas: int = 0,
) -> tuple[Any, DurabilityReport]:
    """Run `script` and confirm it durable in one pipeline: its answer, and the verdict on it.

    The script goes by EVALSHA in the pipeline (redis-py's script object would add a SCRIPT EXISTS
    round trip to each pipeline); a server that lost it answers NOSCRIPT, having run nothing, and the
    pipeline is sent again after SCRIPT LOAD. `args[0]` (the transition id) is the barrier's value.

    Raises:
        redis.ResponseError: the script failed (a bug in it).
        redis.ConnectionError, OSError: the server cannot be reached.
    """
    # On a Cluster, WAITAOF and CONFIG GET go to the node that owns the card's slot, and so travel on
    # the connection that carried the script and the barrier.
    [route] = await routes(client, barrier_key)
    for _attempt in range(2):
        async with client.pipeline(transaction=False) as pipe:
            # As a raw command: a Cluster pipeline refuses its evalsha() method, yet routes the command by its keys.
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            queue_confirmation(
                pipe,
                waitaof=waitaof,
                barrier_key=barrier_key,
                barrier=str(args[0]),
                fsync_timeout_ms=fsync_timeout_ms,
                route=route,
                min_replicas=min_replicas,
            )
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        if not isinstance(replies[0], NoScriptError):
            break
        script.sha = await client.script_load(script.script)
    if isinstance(replies[0], Exception):
        raise replies[0]
    return replies[0], read_confirmation(
        replies[1:], waitaof=waitaof, fsync_timeout_ms=fsync_timeout_ms, min_replicas=min_replicas
    )


def queue_confirmation(
    pipe: aioredis.client.Pipeline,
    *,
    waitaof: bool,
    barrier_key: str,
    barrier: str,
    fsync_timeout_ms: int,
    route: Mapping[str, Any] | None = None,
    min_replicas: int = 0,
) -> None:
    """Queue, after a transition's script in `pipe`, what confirms it durable (see the module docstring).

    The barrier matters only where ``WAITAOF`` is used: ``WAITAOF`` waits for the connection's own last
    write, so a script that wrote nothing (a replayed transition, an open card found again), or a
    pipeline redis-py re-sent on a new connection, would otherwise be "confirmed" without waiting for
    the write it answers about. `route` sends the commands without keys to the barrier's node
    (`gateway.store.client.routes`). With `min_replicas`, the transition must also have reached that
    many replicas: ``WAITAOF 1 <n>`` (fsynced there too) where the server has it, else ``WAIT <n>``
    (in the replicas' memory).
    """
    route = route or {}
    if waitaof or min_replicas:
        pipe.set(barrier_key, barrier)
    if waitaof:
        pipe.execute_command("WAITAOF", 1, min_replicas, fsync_timeout_ms, **route)
    elif min_replicas:
        pipe.execute_command("WAIT", min_replicas, fsync_timeout_ms, **route)
    # One CONFIG GET for the three names (Redis 7.0+).
    pipe.execute_command("CONFIG", "GET", *_CONFIG, **route)


def read_confirmation(
    replies: Sequence[Any], *, waitaof: bool, fsync_timeout_ms: int, min_replicas: int = 0
) -> DurabilityReport:
    """The verdict from the replies of what `queue_confirmation` queued (errors as exception values)."""
    problems: list[str] = []
    if waitaof:
        fsynced = replies[1]
        if isinstance(fsynced, Exception) or not fsynced or int(fsynced[0]) < 1:
            problems.append(f"the AOF fsync was not confirmed within {fsync_timeout_ms} ms")
        elif int(fsynced[1]) < min_replicas:
            problems.append(f"{fsynced[1]} of {min_replicas} replicas fsynced it within {fsync_timeout_ms} ms")
        replies = replies[2:]
    elif min_replicas:
        acked = replies[1]
        if isinstance(acked, Exception) or int(acked) < min_replicas:
            shown = "none" if isinstance(acked, Exception) else acked
            problems.append(f"{shown} of {min_replicas} replicas acknowledged within {fsync_timeout_ms} ms")
        replies = replies[2:]
    [config] = replies
    if isinstance(config, Exception):
        return DurabilityReport.of([*problems, _unverifiable(config)])
    pairs = _config_pairs(config)
    # A configuration problem explains a failed fsync (WAITAOF refuses to run without the AOF): say that.
    config_problems = durability_problems(*(config_value(pairs, name) for name in _CONFIG))
    return DurabilityReport.of(config_problems or problems)


def config_value(reply: Any, name: str) -> str | None:
    for key, value in dict(reply).items():
        if _text(key) == name:
            return _text(value)
    return None


def _config_pairs(config: Any) -> dict[Any, Any]:
    # redis-py parses the reply into a mapping; a flat list of names and values is paired up all the same.
    return config if isinstance(config, dict) else dict(zip(config[::2], config[1::2], strict=True))


def _unverifiable(error: Exception) -> str:
    return f"CONFIG GET is unavailable ({error}); cannot verify"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class LedgerGuard:
    """Cached answer to "may a write go through the ledger now?": the pre-check, never the gate."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        interval_seconds: float = 5.0,
        retry_seconds: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._interval = interval_seconds
        self._retry = retry_seconds
        self._clock = clock
        self._checked_at: float | None = None
        self._writable = False
        self.problems: tuple[str, ...] = ("not checked yet",)

    async def writable(self) -> bool:
        """True while the last verdict (a check, or a transition's confirmation) found the ledger durable.

        A durable verdict is re-checked after `interval_seconds`, a refusal after `retry_seconds`, so a
        ledger made durable again is used again within that time, without a restart.
        """
        now = self._clock()
        expiry = self._interval if self._writable else self._retry
        if self._checked_at is None or now - self._checked_at >= expiry:
            await self.check()
        return self._writable

    async def check(self) -> bool:
        """Check now, log a change of verdict, and remember it."""
        try:
            report = await check_durability(self._client)
        except (RedisError, OSError) as error:
            report = DurabilityReport(durable=False, problems=(f"ledger unreachable: {type(error).__name__}",))
        self.observe(report)
        return self._writable

    def observe(self, report: DurabilityReport) -> None:
        """Take a verdict found elsewhere (a transition's confirmation) as the current one."""
        if report.durable != self._writable or self._checked_at is None:
            if report.durable:
                logger.info("ledger is durable; writes are enabled")
            else:
                logger.error("writes are refused: %s", "; ".join(report.problems))
        self._writable, self.problems, self._checked_at = report.durable, report.problems, self._clock()

    def invalidate(self) -> None:
        """Forget the verdict (after a Redis error), so the next call checks again."""
        self._checked_at = None
        self._writable = False
