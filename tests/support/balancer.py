"""A load balancer in front of several gateway replicas, as an HTTP client transport for tests.

`Balancer` forwards each request of one client to one of the replicas' base URLs, over real HTTP:

* ``sticky=False``: round robin, request by request (what a plain L7 balancer does, and all the
  2026-07-28 era needs);
* ``sticky=True``: round robin for a request without ``Mcp-Session-Id``; a request carrying one goes
  to the replica that issued it, learnt from the ``Mcp-Session-Id`` header of that replica's answer
  (NGINX Plus's ``sticky learn``, Envoy's stateful-session header filter). A session id no replica issued
  is sent round robin, as such a balancer would.

`served` counts what each replica answered, so a test can say both replicas took part.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx2

__all__ = ["Balancer"]

_SESSION_HEADER = "mcp-session-id"


class Balancer(httpx2.AsyncBaseTransport):
    def __init__(self, replicas: Sequence[str], *, sticky: bool) -> None:
        if not replicas:
            raise ValueError("a balancer needs at least one replica")
        self._replicas = [httpx2.URL(url) for url in replicas]
        self._sticky = sticky
        self._next = 0
        self._owner: dict[str, int] = {}
        self._inner = httpx2.AsyncHTTPTransport()
        self.served = [0] * len(self._replicas)
        """Answers per replica, in the order the replicas were given."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        index = self._choose(request.headers.get(_SESSION_HEADER))
        target = self._replicas[index]
        url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
        # A new request, so its Host header names the replica it goes to, as a proxy's would.
        headers = [(b"host", url.netloc), *((k, v) for k, v in request.headers.raw if k.lower() != b"host")]
        forwarded = httpx2.Request(request.method, url, headers=headers, stream=request.stream,
                                   extensions=request.extensions)  # fmt: skip
        response = await self._inner.handle_async_request(forwarded)
        self.served[index] += 1
        issued = response.headers.get(_SESSION_HEADER)
        if self._sticky and issued:
            self._owner[issued] = index
        return response

    def _choose(self, session_id: str | None) -> int:
        if self._sticky and session_id in self._owner:
            return self._owner[session_id]
        index, self._next = self._next, (self._next + 1) % len(self._replicas)
        return index

    async def aclose(self) -> None:
        await self._inner.aclose()
