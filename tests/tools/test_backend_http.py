"""Backend answers as the agent's path turns them into envelopes: the words of a refusal stay with people."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from gateway import Access, Mode, Tool, ToolContext, fill_path, request_json
from gateway.codes import Code
from gateway.errors import PathArgumentError
from gateway.outbound.backend_client import AiohttpUpstream
from gateway.principal import Principal
from gateway.registry.manifest import AdapterManifest
from gateway.registry.tools import tools_from_manifest
from gateway.tools.backend_http import DEFAULT_RETRY_AFTER_SECONDS, MAX_RETRY_AFTER_SECONDS, retry_after_of
from tests.support.canaries import CANARY, planted
from tests.support.examples import examples
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
    [tool] = tools_from_manifest(
        "demo",
        AdapterManifest.model_validate(
            {"base_url": base_url, "signing_secret_env": "DEMO_SIGNING_KEY", "tools": [spec]}
        ),
    )
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


@settings(database=None, deadline=None, max_examples=examples(150))
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
    assert set(seen["error"]) <= {"code", "message", "retryable", "details"}
    # A backend's 429 adds the wait as a number the gateway parsed (its default here: no Retry-After).
    details = seen["error"].get("details")
    assert details is None or (seen["error"]["code"] == "RATE_LIMITED" and details == {"retry_after": 1.0})


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


# ---- path placeholders ---------------------------------------------------------------------------

TEMPLATE = "/notes/{note_id}/detail"
DOTTED = st.sampled_from(
    [".", "..", "", "%2e", "%2E%2e", ".%2e", "%252e%252e", "．．", "a/../b", "..\\", "%2e%2e%5c", "./", "/..", "..;"]
)
PLACEHOLDER_VALUES = (
    DOTTED
    | st.text(max_size=10)
    | st.text(alphabet="./\\%2eEfF5c;", max_size=8)
    | st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=2)  # lone surrogates: not text
)


class _NoteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note_id: str


async def _note(args: _NoteArgs, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", fill_path(TEMPLATE, note_id=args.note_id))


NOTE_IN_PROCESS = Tool(
    name="demo_note",
    adapter="demo",
    description="Get one note.",
    mode=Mode.READ,
    arguments=_NoteArgs,
    output=_Out,
    access=Access.public(),
    execute=_note,
)


def _registered_note(base_url: str) -> Tool:
    spec = {
        "name": "demo_note",
        "description": "Get one note.",
        "mode": "read",
        "method": "GET",
        "path": TEMPLATE,
        "input_schema": {
            "type": "object",
            "properties": {"note_id": {"type": "string"}},
            "required": ["note_id"],
            "additionalProperties": False,
        },
        "output_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
        "access": {"public": True},
    }
    [tool] = tools_from_manifest(
        "demo",
        AdapterManifest.model_validate(
            {"base_url": base_url, "signing_secret_env": "DEMO_SIGNING_KEY", "tools": [spec]}
        ),
    )
    return tool


def _arrived_intact(raw_paths: list[bytes], value: str) -> bool:
    """One request, at the template's endpoint, with the value as its one middle segment."""
    if len(raw_paths) != 1:
        return False
    parts = raw_paths[0].split(b"/")
    return len(parts) == 4 and parts[:2] == [b"", b"notes"] and parts[3] == b"detail" and unquote(parts[2]) == value


@settings(database=None, deadline=None, max_examples=examples(300))
@given(value=PLACEHOLDER_VALUES)
async def test_a_filled_path_reaches_the_templates_endpoint_with_the_value_intact_or_is_refused(
    planted_backend: tuple[str, PlantedBackend], value: str
) -> None:
    """Sent by the gateway's own HTTP client, whatever the value: the server receives exactly the template's
    path with the value as one segment, or `fill_path` refuses it and nothing is sent."""
    url, backend = planted_backend
    backend.plant({"ok": True})
    backend.forget()
    try:
        path = fill_path(TEMPLATE, note_id=value)
    except PathArgumentError as refused:
        assert refused.argument == "note_id"
        return
    client = AiohttpUpstream(url, service="demo")
    try:
        await client.request("GET", path)
    finally:
        await client.aclose()
    assert _arrived_intact(backend.raw_paths, value), (value, backend.raw_paths)


@pytest.mark.parametrize("value", [".", "..", "", "%2e%2e", "a/../b", "．．"])
def test_dot_segments_empty_values_and_their_encoded_forms_are_refused(value: str) -> None:
    """A value that is, or decodes to, a dot segment (or is empty) would change the endpoint: refused."""
    with pytest.raises(PathArgumentError):
        fill_path(TEMPLATE, note_id=value)


@settings(database=None, deadline=None, max_examples=examples(150))
@given(value=PLACEHOLDER_VALUES)
@pytest.mark.parametrize("kind", ["in-process", "registered"])
async def test_a_placeholder_value_never_changes_the_endpoint_an_agent_calls(
    planted_backend: tuple[str, PlantedBackend], kind: str, value: str
) -> None:
    """Through the agent's path, for an in-process and a registered tool: the call reaches the template's
    endpoint with the value intact, or it is an audited VALIDATION_ERROR and nothing is sent."""
    url, backend = planted_backend
    backend.plant({"ok": True})
    backend.forget()
    client = AiohttpUpstream(url, service="demo")
    try:
        tool = NOTE_IN_PROCESS if kind == "in-process" else _registered_note(url)
        executor, audit = agent_path(tool, clients={"demo": client})
        envelope = await executor.execute(ALICE, "demo_note", {"note_id": value})
    finally:
        await client.aclose()
    [event] = audit.events
    if envelope.is_error:
        assert envelope.code is Code.VALIDATION_ERROR and event.code == "VALIDATION_ERROR"
        assert backend.raw_paths == []
    else:
        assert _arrived_intact(backend.raw_paths, value), (value, backend.raw_paths)


def test_adapters_refuse_to_send_without_the_header_gateway_identity_signs() -> None:
    from gateway.signing.identity import IDENTITY_HEADER
    from gateway.tools import backend_http as adapter_http

    assert adapter_http._IDENTITY_HEADER == IDENTITY_HEADER


NOW = 1_764_000_000.0  # 2025-11-24T16:00:00Z


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        (" 120 ", 120.0),
        ("0", 0.0),
        ("99999999999", MAX_RETRY_AFTER_SECONDS),
        ("Mon, 24 Nov 2025 16:00:30 GMT", 30.0),
        ("Mon, 24 Nov 2025 15:00:00 GMT", 0.0),
        ("Fri, 24 Nov 2095 16:00:30 GMT", MAX_RETRY_AFTER_SECONDS),
        (None, DEFAULT_RETRY_AFTER_SECONDS),
        ("", DEFAULT_RETRY_AFTER_SECONDS),
        ("-5", DEFAULT_RETRY_AFTER_SECONDS),
        ("1.5", DEFAULT_RETRY_AFTER_SECONDS),
        ("soon", DEFAULT_RETRY_AFTER_SECONDS),
    ],
)
def test_a_retry_after_is_read_as_seconds_or_a_date_within_bounds(header: str | None, seconds: float) -> None:
    """Delta-seconds and HTTP-dates (RFC 9110) are read; anything else is the default wait."""
    assert retry_after_of(header, now=NOW) == seconds


@settings(database=None, deadline=None, max_examples=examples(300))
@given(header=st.text(max_size=60) | st.from_regex(r"\A[0-9]{1,400}\Z"))
def test_any_retry_after_text_gives_a_bounded_wait(header: str) -> None:
    """Whatever a backend writes in Retry-After, the wait is a number within 0 .. the bound."""
    assert 0.0 <= retry_after_of(header, now=NOW) <= MAX_RETRY_AFTER_SECONDS
