"""Backend answers as the agent's path turns them into envelopes: the words of a refusal stay with people."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from gateway import Access, Mode, Tool, ToolContext, request_json
from gateway.codes import Code
from gateway.principal import Principal
from gateway.registry.manifest import AdapterManifest
from gateway.registry.tools import tools_from_manifest
from gateway.upstream_aiohttp import AiohttpUpstream
from tests.support.canaries import CANARY, planted
from tests.support.executors import agent_path
from tests.support.planted import PlantedBackend, serve_planted

pytestmark = pytest.mark.anyio

ALICE = Principal(subject="alice@acme.example", org="acme", roles=frozenset({"staff"}), key_id="key_a")
WORDS = st.from_regex(r"[a-z_]{0,12}", fullmatch=True)


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    ok: bool


async def _get(args: _NoArgs, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", "/things")


IN_PROCESS = Tool(
    name="demo_get",
    adapter="demo",
    description="Get the things.",
    mode=Mode.READ,
    arguments=_NoArgs,
    output=_Out,
    access=Access.public(),
    execute=_get,
)


def _registered(base_url: str) -> Tool:
    spec = {
        "name": "demo_get",
        "description": "Get the things.",
        "mode": "read",
        "method": "GET",
        "path": "/things",
        "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
        "output_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
        "access": {"public": True},
    }
    [tool] = tools_from_manifest("demo", AdapterManifest.model_validate({"base_url": base_url, "tools": [spec]}))
    return tool


@pytest.fixture(scope="module")
def planted_backend() -> Iterator[tuple[str, PlantedBackend]]:
    with serve_planted() as served:
        yield served


REFUSALS = st.sampled_from([409, 422])
BODIES = st.one_of(
    WORDS.map(lambda word: {"error": f"{word}{CANARY}"}),  # a plain machine word, as a backend's code looks
    planted().map(lambda text: {"error": text}),
    planted().map(lambda text: {"error": "slot_taken", "message": text, "detail": {"why": text}}),
    planted().map(lambda text: {"error": {"code": text}}),
    planted().map(lambda text: [text]),
    planted().map(lambda text: text.encode()),  # not JSON at all
)


@settings(database=None, deadline=None, max_examples=150)
@given(status=REFUSALS | st.integers(400, 599), body=BODIES)
@pytest.mark.parametrize("kind", ["in-process", "registered"])
async def test_no_byte_a_backend_writes_in_an_error_reaches_the_model(
    planted_backend: tuple[str, PlantedBackend], kind: str, status: int, body: Any
) -> None:
    """Any error status with any body: the model gets a code of the gateway's vocabulary and its fixed
    message, never the backend's words, whether they look like a machine code or not."""
    url, backend = planted_backend
    backend.plant(body, status=status)
    client = AiohttpUpstream(url, service="demo")
    try:
        executor, audit = agent_path(IN_PROCESS if kind == "in-process" else _registered(url), clients={"demo": client})
        envelope = await executor.execute(ALICE, "demo_get", {})
    finally:
        await client.aclose()
    seen = envelope.for_model()
    assert envelope.code in set(Code)
    assert CANARY not in json.dumps(seen, ensure_ascii=False)
    assert set(seen["error"]) <= {"code", "message", "retryable"}


@pytest.mark.parametrize("status", [409, 422])
async def test_a_refusal_code_goes_to_the_audit_not_the_model(
    planted_backend: tuple[str, PlantedBackend], status: int
) -> None:
    """The backend's machine code for a refusal is on the human channel: the audit event's reason."""
    url, backend = planted_backend
    backend.plant({"error": "slot_taken"}, status=status)
    client = AiohttpUpstream(url, service="demo")
    try:
        executor, audit = agent_path(IN_PROCESS, clients={"demo": client})
        envelope = await executor.execute(ALICE, "demo_get", {})
    finally:
        await client.aclose()
    assert envelope.for_model()["error"]["code"] == "CONFLICT"
    assert "slot_taken" not in json.dumps(envelope.for_model())
    [event] = audit.events
    assert (event.code, event.outcome) == ("CONFLICT", "error") and "slot_taken" in event.reason
