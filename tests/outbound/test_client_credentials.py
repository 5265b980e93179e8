"""The one client-credentials token cache, through both of its transports: the registered adapters' aiohttp client
(`ClientCredentials`) and the fronted MCP servers' httpx2 auth (`OAuthClientCredentials`). Against a real
authorization server and a real backend over HTTP: one fetch for requests made together, one more (and one more
try) when the backend answers 401, and never a second more."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator

import anyio
import httpx2
import pytest
from starlette.types import Receive, Scope, Send

from backends.serve import serve_app_in_thread
from gateway.config.upstreams import OAuthClientSection
from gateway.errors import UpstreamUnavailableError
from gateway.outbound.backend_auth import ClientCredentials
from gateway.outbound.backend_client import AiohttpUpstream
from gateway.upstreams.credentials import OAuthClientCredentials
from tests.support.token_issuer import TokenIssuer, serve_issuer

pytestmark = pytest.mark.anyio

CLIENT, SECRET = "countersign-gateway", "client-secret"


class RefusingBackend:
    """Answers 401 to the first `refusals` requests (a token revoked before it expired), 200 after; records each
    request's Authorization."""

    def __init__(self) -> None:
        self.refusals = 0
        self.seen: list[str] = []
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        with self._lock:
            self.seen.append(dict(scope["headers"]).get(b"authorization", b"").decode())
            refused = self.refusals > 0
            self.refusals -= 1 if refused else 0
        status = 401 if refused else 200
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": b"[]"})


Send_ = Callable[[], Awaitable[int]]


@pytest.fixture
def issuer() -> Iterator[TokenIssuer]:
    with serve_issuer() as served:
        served.clients[CLIENT] = SECRET
        yield served


@pytest.fixture
def backend() -> Iterator[tuple[str, RefusingBackend]]:
    app = RefusingBackend()
    with serve_app_in_thread(app) as url:
        yield url, app


def _aiohttp_sender(issuer: TokenIssuer, url: str) -> tuple[Send_, Callable[[], Awaitable[None]]]:
    client = AiohttpUpstream(url, service="notes", credential=ClientCredentials(f"{issuer.url}/token", CLIENT, SECRET))

    async def send() -> int:
        return (await client.request("GET", "/items")).status

    return send, client.aclose


def _httpx_sender(issuer: TokenIssuer, url: str) -> tuple[Send_, Callable[[], Awaitable[None]]]:
    oauth = OAuthClientSection(token_url=f"{issuer.url}/token", client_id=CLIENT, client_secret_env="X")
    http = httpx2.AsyncClient(auth=OAuthClientCredentials("notes", oauth, SECRET))

    async def send() -> int:
        return (await http.get(f"{url}/items")).status_code

    return send, http.aclose


SENDERS = pytest.mark.parametrize("sender", [_aiohttp_sender, _httpx_sender], ids=["aiohttp", "httpx2"])
Sender = Callable[[TokenIssuer, str], tuple[Send_, Callable[[], Awaitable[None]]]]


async def _statuses(sender: Sender, issuer: TokenIssuer, url: str, *, together: int = 1) -> list[int]:
    """The statuses of `together` requests started at once through `sender`'s transport, closed after."""
    send, close = sender(issuer, url)
    statuses: list[int] = []

    async def one() -> None:
        statuses.append(await send())

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                for _ in range(together):
                    group.start_soon(one)
    finally:
        await close()
    return statuses


@SENDERS
async def test_requests_made_together_share_one_fetched_token(
    issuer: TokenIssuer, backend: tuple[str, RefusingBackend], sender: Sender
) -> None:
    """Five requests started at once wait for one token request, and each carries its token."""
    assert await _statuses(sender, issuer, backend[0], together=5) == [200] * 5
    assert issuer.hits["/token"] == 1
    assert len(set(backend[1].seen)) == 1 and backend[1].seen[0].startswith("Bearer ey")


@SENDERS
async def test_a_401_fetches_one_new_token_and_tries_once_more(
    issuer: TokenIssuer, backend: tuple[str, RefusingBackend], sender: Sender
) -> None:
    """The backend refuses the token once: one more token request, the request made once more, and it answers."""
    backend[1].refusals = 1
    assert await _statuses(sender, issuer, backend[0]) == [200]
    assert issuer.hits["/token"] == 2 and len(backend[1].seen) == 2


@SENDERS
async def test_a_second_401_stands(issuer: TokenIssuer, backend: tuple[str, RefusingBackend], sender: Sender) -> None:
    """A backend that refuses every token gets the request twice, and the 401 is the answer: no loop of fetches."""
    backend[1].refusals = 10
    assert await _statuses(sender, issuer, backend[0]) == [401]
    assert issuer.hits["/token"] == 2 and len(backend[1].seen) == 2


@SENDERS
async def test_no_token_sends_nothing(
    issuer: TokenIssuer, backend: tuple[str, RefusingBackend], sender: Sender
) -> None:
    """A refused client secret is UPSTREAM_UNAVAILABLE, not sent: the backend saw nothing."""
    issuer.clients[CLIENT] = "another-secret"
    with pytest.raises(ExceptionGroup) as raised:
        await _statuses(sender, issuer, backend[0])
    [refused] = raised.value.exceptions
    assert isinstance(refused, UpstreamUnavailableError) and refused.sent is False
    assert backend[1].seen == []
