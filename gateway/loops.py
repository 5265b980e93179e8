"""One way to run a background step forever: the gateway's pollers and the worker's loops.

A step that fails with an error of `retry_on` is logged and run again after `retry_seconds`; any
other exception is a bug, logged with its traceback, and the loop goes on (a background loop that
dies silently is worse than one that logs). Cancellation always ends the loop, even when a library
under the step turned the cancellation into its own error on the way out (redis-py reports a
connection cut by a cancel as ``ConnectionError``, or swallows it): the loop checks
`Task.cancelling()` after every step, so a stop request is never lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

__all__ = ["run_forever"]

logger = logging.getLogger(__name__)


async def run_forever(
    step: Callable[[], Awaitable[object]],
    *,
    what: str,
    pause_seconds: float,
    retry_on: tuple[type[Exception], ...],
    retry_seconds: float = 1.0,
) -> None:
    """Run `step`, then wait `pause_seconds`, until cancelled."""
    task = asyncio.current_task()
    while True:
        wait = pause_seconds
        try:
            await step()
        except retry_on as error:
            logger.warning("%s failed (%s: %s); retrying", what, type(error).__name__, error)
            wait = retry_seconds
        except Exception:
            logger.exception("%s failed unexpectedly; continuing", what)
            wait = retry_seconds
        _stop_if_cancelled(task)
        if wait:
            await asyncio.sleep(wait)


def _stop_if_cancelled(task: asyncio.Task[object] | None) -> None:
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
