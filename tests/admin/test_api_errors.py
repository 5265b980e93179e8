"""Every error of the admin and registry APIs is JSON in the documented shape, whatever the path and method."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.datastructures import Secret

from gateway.audit.events import AuditEvent
from gateway.config.settings import Settings
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from tests.support.agents import make_key
from tests.support.examples import examples
from tests.support.services import TEST_AUDIT_SECRET

CODES = {400: "BAD_REQUEST", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "VALIDATION_ERROR",
         422: "VALIDATION_ERROR"}  # fmt: skip


@dataclass
class Gateway:
    loop: asyncio.AbstractEventLoop
    app: Starlette
    admin: str
    service: str

    def send(self, method: str, path: str, token: str | None, body: bytes | None = None) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            headers = {"authorization": f"Bearer {token}"} if token else {}
            async with httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers) as http:
                return await http.request(method, httpx.URL(f"http://gateway{path}"), content=body)

        return self.loop.run_until_complete(go())


@pytest.fixture(scope="module")
def gateway(redis_url: str) -> Iterator[Gateway]:
    """The composed gateway app, run on one loop of its own, with an admin and a service key."""
    loop = asyncio.new_event_loop()
    client = Redis.from_url(redis_url)

    async def keys() -> tuple[str, str]:
        admin = await make_key(client, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver", "registry"))
        service = await make_key(client, kind=KeyKind.SERVICE, subject="expenses-svc", org="acme", roles=())
        return admin, service

    admin, service = loop.run_until_complete(keys())
    app = create_app(Settings(redis_url=redis_url, adapters={}, audit_secret=Secret(TEST_AUDIT_SECRET)), tools=[])
    try:
        yield Gateway(loop=loop, app=app, admin=admin, service=service)
    finally:
        loop.run_until_complete(app.state.gateway.aclose())
        loop.run_until_complete(client.aclose())
        loop.close()


def assert_json_error(response: httpx.Response) -> None:
    where = f"{response.request.method} {response.request.url.raw_path!r} -> {response.status_code}"
    assert response.status_code < 500, where
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/json"), where
        error = response.json()["error"]
        assert isinstance(error["code"], str) and error["code"].isupper(), where
        assert isinstance(error["message"], str), where
        if response.status_code in CODES and response.status_code != 401:
            assert error["code"] in {CODES[response.status_code], "NOT_FOUND", "PERMISSION_DENIED"}, where
        if response.status_code == 405:
            assert response.headers.get("allow"), where


_SEGMENT = st.one_of(
    st.sampled_from(["cards", "adapters", "openapi.json", "accept", "approve", ".", "..", "", "%2F", "crd_1"]),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6),
    st.lists(st.integers(0, 0x1F), min_size=1, max_size=3).map(lambda cs: "x" + "".join(f"%{c:02X}" for c in cs)),
)
_METHODS = st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])


def _path(segments: list[str]) -> str:
    # Percent-encoded segments are sent as they are; any other text is encoded, so control characters arrive intact.
    return "/".join(s if s.startswith("x%") or s in {"%2F"} else quote(s, safe=".") for s in segments)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prefix=st.sampled_from(
        ["/admin/api/", "/admin/api/adapters/", "/admin/api/cards/", "/registry/api/", "/registry/api/adapters/"]
    ),  # fmt: skip
    segments=st.lists(_SEGMENT, max_size=4),
    method=_METHODS,
    body=st.sampled_from([None, b"{}", b"not json", b'{"hash": 1}']),
)
def test_any_path_and_method_answers_json_errors(
    gateway: Gateway, prefix: str, segments: list[str], method: str, body: bytes | None
) -> None:
    """No 5xx, and every 4xx is JSON ``{"error": {"code", "message"}}``, with an Allow header on a 405."""
    token = gateway.service if prefix.startswith("/registry") else gateway.admin
    response = gateway.send(method, prefix + _path(segments), token, body if method not in {"GET", "HEAD"} else None)
    if not response.request.url.path.startswith(("/admin/api", "/registry/api")):
        return  # ".." segments took the request out of the APIs (the client removes dot segments)
    if method != "HEAD":
        assert_json_error(response)
    else:
        assert response.status_code < 500


@pytest.mark.parametrize("path", ["/admin/api/cards/crd%0Ax", "/admin/api/crd%0A", "/admin/api/adapters/a%0A/b",
                                  "/registry/api/adapters/%0A", "/registry/api/x%0D%0Ay/z"])  # fmt: skip
def test_control_characters_in_a_path_get_a_json_404(gateway: Gateway, path: str) -> None:
    token = gateway.service if path.startswith("/registry") else gateway.admin
    response = gateway.send("GET", path, token)
    assert response.status_code == 404 and response.json()["error"]["code"] == "NOT_FOUND"
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize("path", ["/admin/api/adapters/nothing/else", "/admin/api/nowhere", "/registry/api/nowhere"])
def test_unknown_paths_get_a_json_404(gateway: Gateway, path: str) -> None:
    token = gateway.service if path.startswith("/registry") else gateway.admin
    response = gateway.send("GET", path, token)
    assert response.status_code == 404 and response.json()["error"]["code"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", "/admin/api/adapters/", {"GET", "HEAD"}),
        ("POST", "/admin/api/adapters", {"GET", "HEAD"}),
        ("PUT", "/admin/api/adapters/expenses", {"GET", "HEAD", "DELETE"}),
        ("GET", "/admin/api/adapters/expenses/accept", {"POST"}),
        ("DELETE", "/admin/api/cards/crd_1", {"GET", "HEAD"}),
        ("GET", "/admin/api/cards/crd_1/approve", {"POST"}),
        ("DELETE", "/registry/api/adapters/expenses", {"GET", "HEAD", "PUT"}),
    ],
)
def test_a_wrong_method_is_a_json_405_with_every_allowed_method(
    gateway: Gateway, method: str, path: str, allow: set[str]
) -> None:
    token = gateway.service if path.startswith("/registry") else gateway.admin
    response = gateway.send(method, path, token)
    assert response.status_code == 405 and response.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert {m.strip() for m in response.headers["allow"].split(",")} == allow


def test_the_adapter_list_answers_with_and_without_the_trailing_slash(gateway: Gateway) -> None:
    with_slash = gateway.send("GET", "/admin/api/adapters/", gateway.admin)
    without = gateway.send("GET", "/admin/api/adapters", gateway.admin)
    assert with_slash.status_code == without.status_code == 200
    assert without.json() == with_slash.json() and "adapters" in without.json()


@pytest.mark.parametrize("path", ["/admin/api/cards/crd%0Ax", "/admin/api/adapters", "/admin/api/nowhere",
                                  "/admin/api/adapters/a/b", "/registry/api/x%0Ay"])  # fmt: skip
def test_without_a_key_every_path_is_a_json_401_first(gateway: Gateway, path: str) -> None:
    response = gateway.send("GET", path, None)
    assert response.status_code == 401 and response.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize(("method", "path"), [("GET", "/admin/api/nowhere"), ("PATCH", "/registry/api/adapters/x")])
def test_a_refusal_no_route_answers_is_audited_for_the_caller(gateway: Gateway, method: str, path: str) -> None:
    """Like every refusal, a 404 or 405 that no route gave is in the audit trail, with its code and request."""
    token = gateway.service if path.startswith("/registry") else gateway.admin
    response = gateway.send(method, path, token)
    code = response.json()["error"]["code"]

    async def recent() -> list[AuditEvent]:
        return list(await gateway.app.state.gateway.audit.recent(5))

    events = gateway.loop.run_until_complete(recent())
    assert any((e.action, e.outcome, e.code, e.reason) == ("http.request", "deny", code, f"{method} {path}")
               for e in events)  # fmt: skip
