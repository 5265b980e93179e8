"""The compatibility suite's one scenario, run with each agent framework's own scripted model.

An agent builder's first session, through the framework (`tests/compat/drivers/`) in its own pinned
environment (`tests.support.compat_envs`): the model is offered the tools, reads (``rooms_list``),
proposes a booking and sees the card receipt; an administrator approves through the admin API and the
worker runs the write; the model follows the card (``approvals_status``) to SUCCEEDED; and a refusal
(a card that is not the caller's) is shown to the model with its sentence first.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.cards.card import CardState
from tests.support.agents import make_key
from tests.support.cards import approve_as_admin, settled
from tests.support.compat_envs import CompatUnavailableError, install_framework

__all__ = ["DRIVER_ENV", "Seen", "driver", "framework_python", "run_scenario"]

DRIVERS = Path(__file__).parents[1] / "compat" / "drivers"
RUN_TIMEOUT_SECONDS = 120.0
UNKNOWN_CARD = "crd_1_" + "0" * 32
NOT_FOUND_SENTENCE = "No such object is visible to you."
_CARD_ID = re.compile(r"crd_[0-9]{1,2}_[0-9a-f]{32}")
DRIVER_ENV = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "unused", "OPENAI_AGENTS_DISABLE_TRACING": "1"}
"""A driver's whole environment. The Agents SDK exports traces to OpenAI unless told not to: with no real key
that export fails, and it retries with backoff for seconds at every exit."""


@dataclass(frozen=True)
class Seen:
    tools: list[str]
    """The tool names the framework offered the model."""
    seen: list[str]
    """Per tool call, the text the framework put in front of the model."""


def framework_python(name: str) -> Path:
    """The Python of `name`'s pinned environment; with ``CI`` set a missing one fails the test, else skips it."""
    try:
        return install_framework(name)
    except CompatUnavailableError as error:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI needs the {name} environment: {error}")
        pytest.skip(f"{name} environment unavailable: {error}")


@contextmanager
def driver(python: Path, script: str) -> Iterator[Any]:
    """`script` (a file of `DRIVERS`) running in the framework's environment, as a function from a spec to what
    it prints for it: one process answers each spec on a line of its own, so a scenario imports its framework
    (seconds, for some) once, not once per step."""
    with (
        tempfile.TemporaryFile("w+") as errors,
        subprocess.Popen(
            [str(python), str(DRIVERS / script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env={"HOME": os.environ.get("HOME", "/tmp"), **DRIVER_ENV},
        ) as process,
    ):
        assert process.stdin is not None and process.stdout is not None
        stdin, stdout = process.stdin, process.stdout

        def run(spec: dict[str, Any]) -> dict[str, Any]:
            stdin.write(json.dumps(spec) + "\n")
            stdin.flush()
            deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
            while not select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                assert time.monotonic() < deadline, f"{script} gave no answer in {RUN_TIMEOUT_SECONDS} s"
            line = stdout.readline()
            if not line:
                errors.seek(0)
                raise AssertionError(f"{script} ended (status {process.wait(10)}): {errors.read()[-4000:]}")
            answer: dict[str, Any] = json.loads(line)
            return answer

        try:
            yield run
        finally:
            stdin.close()  # the end of its specs: it exits, and leaving `with` waits for it
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def _seen(answer: dict[str, Any]) -> Seen:
    return Seen(tools=list(answer["tools"]), seen=[str(s) for s in answer["seen"]])


async def run_scenario(
    redis: Redis, mcp_url: str, python: Path, script: str, *, day: str, **options: Any
) -> dict[str, str]:
    """The whole scenario; returns what the model saw on the receipt, the outcome and the refusal."""
    token = await make_key(redis, roles=("staff",))
    spec: dict[str, Any] = {"url": mcp_url, "token": token, **options}
    booking = {"room_id": "room-eos", "date": day, "start": "14:00", "end": "14:30", "title": "Compat"}
    with driver(python, script) as run:
        proposed = _seen(run({**spec, "calls": [["rooms_list", {}], ["rooms_book", booking]]}))
        assert {"rooms_list", "rooms_book", "approvals_status"} <= set(proposed.tools), proposed.tools
        read, receipt = proposed.seen
        assert "room-eos" in read, read
        assert "PENDING" in receipt, receipt
        [card_id] = set(_CARD_ID.findall(receipt))
        await approve_as_admin(redis, mcp_url.removesuffix("/mcp"), card_id)
        assert (await settled(redis, card_id)).state is CardState.SUCCEEDED
        followed = _seen(run({**spec, "calls": [["approvals_status", {"card_id": card_id}]]}))
        [outcome] = followed.seen
        assert "SUCCEEDED" in outcome, outcome
        refused = _seen(run({**spec, "calls": [["approvals_status", {"card_id": UNKNOWN_CARD}]]}))
    [refusal] = refused.seen
    assert NOT_FOUND_SENTENCE in refusal and "NOT_FOUND" in refusal, refusal
    return {"receipt": receipt, "outcome": outcome, "refusal": refusal}
