"""The README's "Connect your agent" examples, run as written.

Running them is CI's (``slow``): each framework's own flow, through the same drivers and scripted models, is
`tests/compat/test_<framework>.py`'s in the inner loop, which keeps here only that each Python example is
valid code as the driver wraps it.

Each Python example runs in its framework's pinned environment (`tests.support.compat_envs`) with
``url``, ``key`` and the framework's scripted ``model`` bound (`tests/compat/drivers/readme_example.py`);
the scripted model proposes a booking and must be shown the card receipt. The Inspector CLI example
runs with the pinned Inspector on Node 22, its URL and key file replaced by the test gateway's.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.cards.card import CardState
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import make_key
from tests.support.compat_flow import driver, framework_python
from tests.support.inspector_cli import INSPECTOR_VERSION, Inspector, available_inspector

pytestmark = pytest.mark.anyio

README = Path(__file__).parents[2] / "README.md"
_EXAMPLE = re.compile(r"<!-- example: (\w+) -->\n```(\w+)\n(.*?)```", re.S)
_CARD_ID = re.compile(r"crd_[0-9]{1,2}_[0-9a-f]{32}")
DAYS = {"pydantic_ai": "2027-07-11", "openai_agents": "2027-07-12", "langchain": "2027-07-13"}


@pytest.fixture(scope="module")
def inspector() -> Inspector:
    return available_inspector()


def _examples() -> dict[str, tuple[str, str]]:
    return {name: (language, code) for name, language, code in _EXAMPLE.findall(README.read_text())}


def test_the_readme_has_an_example_for_each_framework_of_the_compatibility_suite() -> None:
    assert set(_examples()) == {"pydantic_ai", "openai_agents", "langchain", "fastmcp", "inspector"}


@pytest.mark.parametrize("framework", [*sorted(DAYS), "fastmcp"])
def test_each_python_example_compiles_as_the_driver_wraps_it(framework: str) -> None:
    _, code = _examples()[framework]
    compile("async def _example(url, key, model):\n" + textwrap.indent(code, "    "), "README.md", "exec")


def _run(framework: str, spec: dict[str, Any]) -> dict[str, Any]:
    with driver(framework_python(framework), "readme_example.py") as run:
        return run({"framework": framework, **spec})


async def _pending(redis: Redis, card_id: str) -> None:
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.PENDING


@pytest.mark.slow
@pytest.mark.parametrize("framework", sorted(DAYS))
async def test_a_readme_agent_example_runs_and_its_model_is_shown_the_receipt(
    redis: Redis, mcp_url: str, framework: str
) -> None:
    """The model proposes a booking through the example's wiring and sees the PENDING receipt."""
    _, code = _examples()[framework]
    token = await make_key(redis, roles=("staff",))
    booking = {"room_id": "room-eos", "date": DAYS[framework], "start": "10:00", "end": "10:30", "title": "Readme"}
    answer = _run(framework, {"code": code, "url": mcp_url, "token": token, "calls": [["rooms_book", booking]]})
    assert "rooms_book" in answer["tools"]
    [receipt] = answer["seen"]
    assert "PENDING" in receipt, receipt
    await _pending(redis, _CARD_ID.findall(receipt)[0])
    assert answer["printed"].strip()


@pytest.mark.slow
async def test_the_readme_fastmcp_example_prints_the_pending_card_twice(redis: Redis, mcp_url: str) -> None:
    _, code = _examples()["fastmcp"]
    token = await make_key(redis, roles=("staff",))
    answer = _run("fastmcp", {"code": code, "url": mcp_url, "token": token, "calls": []})
    first, second = answer["printed"].strip().splitlines()
    status, card_id = first.split()
    assert (status, second) == ("PENDING", "PENDING")
    await _pending(redis, card_id)


async def test_the_readme_inspector_example_answers_the_receipt(
    redis: Redis,
    mcp_url: str,
    inspector: Any,
    tmp_path: Path,  # noqa: F811
) -> None:
    """The command as written (its package pinned to the Inspector the tests install), pointed at the test
    gateway and given the test's key in place of the demo key file."""
    _, code = _examples()["inspector"]
    token = await make_key(redis, roles=("staff",))
    command = code.replace("\\\n", " ").replace("$(cat .countersign/demo-agent.key)", token)
    words = shlex.split(command.replace("http://127.0.0.1:8765/mcp", mcp_url))
    assert words[:2] == ["npx", f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}"]
    ran = inspector.run_as_given(*words[2:], "--format", "json", "--quiet")
    assert ran.returncode == 0, ran.stderr
    receipt = ran.result()["structuredContent"]
    assert receipt["status"] == "PENDING"
    await _pending(redis, receipt["card_id"])
