"""What rooms, orders and expenses share: per-app state, the service shell in front of every route, the
control routes, and how a service's factory builds its app from the options all factories take.

:func:`build_service_app` is the only way a service becomes a Starlette app: it makes the service's state
from :class:`ServiceOptions` and puts :class:`ServiceShell` in front of the service's routes. The shell
handles each request in this order:

1. record method, path and headers in ``service.requests`` (even requests it then refuses);
2. ``GET /_health`` answers without auth;
3. ``Authorization: Bearer <service_token>`` or 401 ``unauthorized``;
4. control paths (``/_faults``, ``/_requests``) go straight to their routes: no identity, never faulted;
5. ``X-Countersign-Identity``, signed by the gateway for this service, or 400 ``missing_identity``
   when it is absent and 401 ``invalid_identity`` when it does not verify (``backends._http``, and
   the gateway's JWKS when the service has one: ``backends._gateway_keys``); the caller is taken from
   its claims only;
6. with the gateway's JWKS, a write's approval receipt, or 403 ``missing_receipt`` /
   ``invalid_receipt`` (``backends._gateway_keys``);
7. the active fault, if it matches the path (see ``backends._faults``), else the route.

Unknown paths and methods answer in the same ``{"error": ...}`` shape, so an unknown path under
``/orders/`` is as indistinguishable from a missing order as another org's order is.
"""

from __future__ import annotations

import hmac
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Required, TypedDict, TypeVar, Unpack

from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from backends._faults import FaultSwitch, faults_endpoint, inject
from backends._gateway_keys import SAFE_METHODS, GatewayKeys, read_body
from backends._http import (
    CALLER_SCOPE_KEY,
    IDENTITY_HEADER,
    ArgsT,
    Caller,
    Endpoint,
    caller_from,
    error,
    verified_caller,
)
from backends._idempotency import Clock, IdempotencyStore, Outcome, idempotency_lookup, idempotent_write
from backends._persist import StateFile, StateFileError

CONTROL_PATHS = frozenset({"/_faults", "/_health", "/_requests"})
"""Paths for whoever runs the service, not for callers: they need the token but no identity, and never fault."""

REQUEST_LOG_SIZE = 1000
DEFAULT_KEY_TTL_SECONDS = 86400.0


class ServiceOptions(TypedDict, total=False):
    """The keyword arguments every service's factory takes besides its data (``create_rooms_app`` and the others).

    * ``service_token`` (required): the bearer token the gateway sends; any other is 401.
    * ``signing_key`` (required): the shared key the gateway signs callers' identities with for this service
      (HS256, the transition; empty when it verifies with the gateway's keys only).
    * ``audience``: the name the gateway knows the service by (the adapter's name); the service's own name
      by default. A request whose identity is not signed for it reaches no route.
    * ``jwks_url``: the gateway's published keys (``/.well-known/jwks.json``); given, identities may be signed
      with them and every write needs the gateway's approval receipt for it (``backends._gateway_keys``).
    * ``state_file``: where the business data and the idempotency records live between runs; what is saved
      there replaces the seed data, and every write saves them again before it answers.
    * ``key_ttl_seconds`` (a day by default) and ``clock`` (monotonic seconds, `time.monotonic` by default):
      how long idempotency keys are remembered; the clock only ages them, and tests pass a fake one.
    """

    service_token: Required[str]
    signing_key: Required[str]
    audience: str
    jwks_url: str | None
    state_file: Path | None
    key_ttl_seconds: float
    clock: Clock


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedRequest:
    """One request as the service received it, before any check; tests read these to prove what arrived."""

    method: str
    path: str
    headers: Mapping[str, str]
    """Header names lower-cased; repeated headers joined with ``", "``."""


class OrgOwned(Protocol):
    """A business object that belongs to one org (a booking, an order, a report)."""

    @property
    def org(self) -> str: ...


OwnedT = TypeVar("OwnedT", bound=OrgOwned)


def in_callers_org(objects: Mapping[str, OwnedT], caller: Caller, object_id: str) -> OwnedT | None:
    """The object `object_id` names when it belongs to `caller`'s org; None for another org's, as for a missing one."""
    found = objects.get(object_id)
    return found if found is not None and found.org == caller.org else None


def next_free_id(template: str, *, first: int, taken: Collection[str]) -> str:
    """The first ``template.format(n)`` not in `taken`, counting from `first` plus how many are taken.

    Ids are numbered in the order they are made and none is ever deleted, so counting the taken ones finds
    the next number without a counter to save; skipping a taken one keeps seed data numbered otherwise safe.
    """
    number = first + len(taken)
    while (candidate := template.format(number)) in taken:
        number += 1
    return candidate


class ServiceState:
    """The per-app state every service has; each service subclasses it with its business data.

    Everything lives on the instance (reachable as ``app.state.service``), so two apps never share state.
    With a `state_file`, the business data (`business_state`) and the idempotency records are saved
    there after every remembered write (`save`) and read back at start (`load_saved`), so they
    outlive the process; the request log and the faults never are.
    """

    def __init__(self, *, key_ttl_seconds: float, clock: Clock, state_file: StateFile | None = None) -> None:
        self.requests: deque[RecordedRequest] = deque(maxlen=REQUEST_LOG_SIZE)
        """The last ``REQUEST_LOG_SIZE`` requests received, oldest first."""
        self.received = 0
        """How many requests were ever received: a mark for `since` (the log's length stops growing)."""
        self.idempotency = IdempotencyStore(ttl_seconds=key_ttl_seconds, clock=clock)
        self.faults = FaultSwitch()
        self._state_file = state_file

    def write_endpoint(
        self, body: TypeAdapter[ArgsT], apply: Callable[[Caller, Mapping[str, Any], ArgsT], Outcome]
    ) -> Endpoint:
        """The endpoint of a write: `apply` behind the idempotency contract (``backends._idempotency``), with
        the body parsed by `body`, and the state saved once each answer is remembered."""
        return idempotent_write(self.idempotency, body, apply, after=self.save)

    def business_state(self) -> dict[str, Any]:
        """What the service changed since its seed data, as JSON data; a subclass with writes says."""
        return {}

    def restore_business_state(self, state: Mapping[str, Any]) -> None:
        """Take back what `business_state` gave."""

    def load_saved(self) -> None:
        """Replace the seed data with the saved state, if there is any (subclasses call this last).

        Raises:
            StateFileError: a state file exists but cannot be read.
        """
        if self._state_file is None or (document := self._state_file.load()) is None:
            return
        try:
            self.restore_business_state(document["business"])
            self.idempotency.restore(document["idempotency"])
        except (KeyError, TypeError, ValueError) as error:
            raise StateFileError(f"{self._state_file.path} does not hold this service's state: {error!r}") from error

    def save(self) -> None:
        """Write the business state and the idempotency records to the state file, if there is one."""
        if self._state_file is not None:
            self._state_file.save({"business": self.business_state(), "idempotency": self.idempotency.snapshot()})

    def record(self, scope: Scope) -> None:
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self.requests.append(RecordedRequest(method=scope["method"], path=scope["path"], headers=headers))
        self.received += 1

    def since(self, mark: int) -> list[RecordedRequest]:
        """The requests received after `mark` (a value of `received`), oldest first.

        Raises:
            LookupError: more arrived since than the log keeps, so some of them are gone.
        """
        count = self.received - mark
        if count > len(self.requests):
            raise LookupError(f"{count} requests since the mark; the log keeps {len(self.requests)}")
        return list(self.requests)[len(self.requests) - count :] if count > 0 else []


class ServiceShell:
    """ASGI middleware applying the request order in the module docstring to every HTTP request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        service: ServiceState,
        service_token: str,
        signing_key: str,
        audience: str,
        gateway_keys: GatewayKeys | None = None,
    ) -> None:
        self.app = app
        self._service = service
        self._token = service_token.encode()
        self._signing_key = signing_key
        self._audience = audience
        self._gateway_keys = gateway_keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self._service.record(scope)
        path: str = scope["path"]
        headers = Headers(scope=scope)
        if path == "/_health" and scope["method"] == "GET":
            await self.app(scope, receive, send)
        elif not self._authorized(headers):
            await error(401, "unauthorized", headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
        elif path in CONTROL_PATHS:
            await self.app(scope, receive, send)
        elif (identity := headers.get(IDENTITY_HEADER)) is None:
            await error(400, "missing_identity")(scope, receive, send)
        elif (caller := await self._caller(identity)) is None:
            await error(401, "invalid_identity")(scope, receive, send)
        else:
            if self._gateway_keys is not None and scope["method"] not in SAFE_METHODS:
                body, receive = await read_body(receive)
                if (refused := await self._gateway_keys.receipt_refusal(scope, body)) is not None:
                    await error(403, refused)(scope, receive, send)
                    return
            scope[CALLER_SCOPE_KEY] = caller
            if (fault := self._service.faults.take(path)) is not None:
                await inject(fault, self.app, scope, receive, send)
            else:
                await self.app(scope, receive, send)

    async def _caller(self, identity: str) -> Caller | None:
        # The shared key first, while the service still has one (the transition); then the gateway's JWKS.
        caller = verified_caller(identity, signing_key=self._signing_key, audience=self._audience)
        if caller is None and self._gateway_keys is not None:
            caller = caller_from(await self._gateway_keys.identity(identity))
        return caller

    def _authorized(self, headers: Headers) -> bool:
        scheme, _, credential = headers.get("authorization", "").partition(" ")
        # compare_digest keeps the check constant-time; latin-1 gives back the raw header bytes.
        return scheme.lower() == "bearer" and hmac.compare_digest(credential.strip().encode("latin-1"), self._token)


ServiceT = TypeVar("ServiceT", bound=ServiceState)
ServiceT_co = TypeVar("ServiceT_co", bound=ServiceState, covariant=True)


class NewService(Protocol[ServiceT_co]):
    """A service's constructor with its data already given; `build_service_app` adds the shared state's part."""

    def __call__(self, *, key_ttl_seconds: float, clock: Clock, state_file: StateFile | None) -> ServiceT_co: ...


def build_service_app(
    new_service: NewService[ServiceT],
    routes: Callable[[ServiceT], Sequence[BaseRoute]],
    *,
    name: str,
    **options: Unpack[ServiceOptions],
) -> Starlette:
    """Make a service with `new_service` and put the shell, the control routes and ``GET /idempotency/{key}``
    around the routes `routes` gives for it; the service is ``app.state.service``.

    `options` are as :class:`ServiceOptions` says; `name` is the audience when they name none.

    Raises:
        ValueError: if ``service_token`` is empty, which would let any bearer in, or there is neither a
            ``signing_key`` nor a ``jwks_url``, which would make any caller's claim as good as another's.
        StateFileError: a state file exists but cannot be read.
    """
    service_token, signing_key, jwks_url = options["service_token"], options["signing_key"], options.get("jwks_url")
    if not service_token:
        raise ValueError("service_token must not be empty")
    if not signing_key and not jwks_url:
        raise ValueError("signing_key must not be empty without a jwks_url")
    audience = options.get("audience", name)
    state_file = options.get("state_file")
    service = new_service(
        key_ttl_seconds=options.get("key_ttl_seconds", DEFAULT_KEY_TTL_SECONDS),
        clock=options.get("clock", time.monotonic),
        state_file=None if state_file is None else StateFile(state_file),
    )
    app = Starlette(
        routes=[
            *routes(service),
            Route("/idempotency/{key}", idempotency_lookup(service.idempotency), methods=["GET"]),
            Route("/_health", _health, methods=["GET"]),
            Route("/_faults", faults_endpoint(service.faults), methods=["GET", "PUT", "DELETE"]),
            Route("/_requests", _requests_endpoint(service), methods=["GET", "DELETE"]),
        ],
        middleware=[
            Middleware(
                ServiceShell,
                service=service,
                service_token=service_token,
                signing_key=signing_key,
                audience=audience,
                gateway_keys=GatewayKeys(jwks_url, audience=audience) if jwks_url else None,
            )
        ],
        exception_handlers={HTTPException: _http_error},
    )
    app.state.service = service
    return app


async def _health(request: Request) -> Response:
    return JSONResponse({"ok": True})


def _requests_endpoint(service: ServiceState) -> Endpoint:
    """``GET /_requests`` lists the request log; ``DELETE`` empties it."""

    async def endpoint(request: Request) -> Response:
        if request.method == "DELETE":
            service.requests.clear()
        listed = [{"method": r.method, "path": r.path, "headers": dict(r.headers)} for r in service.requests]
        return JSONResponse({"requests": listed})

    return endpoint


_HTTP_ERROR_CODES = {404: "not_found", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: Exception) -> Response:
    status_code = exc.status_code if isinstance(exc, HTTPException) else 500
    headers = exc.headers if isinstance(exc, HTTPException) else None
    return JSONResponse({"error": _HTTP_ERROR_CODES.get(status_code, "http_error")}, status_code, headers)
