"""The registry API: services register manifests, admins review and pin them.

``PUT /registry/api/adapters/{name}`` (service key) registers or changes a manifest: 422 lists
every problem; 202 means "stored, quarantined until an admin accepts it"; 200 means "identical to
what is served". ``GET /registry/api/adapters/{name}`` shows the service its own registration.

Admins use ``GET /admin/api/adapters`` (or ``/admin/api/adapters/``: the adapters they may manage,
with state, safety flags and the diff between pinned and proposed), ``GET /admin/api/adapters/{name}``,
``POST /admin/api/adapters/{name}/accept`` with ``{"hash": <proposed_hash reviewed>}``, and
``DELETE /admin/api/adapters/{name}``: an admin with the ``registry`` role for the adapters their
org serves, one with ``registry-operator`` for all (`policies.adapter_authority`; any other is a
403 that says nothing about whether the adapter exists). Those routes are `adapter_review_table`, which the admin API
mounts behind the admin key and lists in its openapi.json. It translates and decides nothing:
`RegistryService` does. Bodies are the models of `gateway.registry.views`; every error, a path no
route matches and a wrong method (405, with an Allow header) included, is JSON ``{"error": {"code", "message"}}``.
The review of fronted MCP servers (`gateway.upstreams.api`) answers its results, documents its refusals and serves
services the same way: `gateway.web.review_routes` serves both.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from gateway.audit.events import AuditEvent, AuditSink
from gateway.auth.bearer import principal_of
from gateway.limits.rate_limiter import AddressBudgets
from gateway.registry.manifest import MAX_MANIFEST_BYTES
from gateway.registry.service import RegistryService
from gateway.registry.views import (
    AdapterActionDone,
    AdapterError,
    AdapterErrorDetail,
    AdapterList,
    AdapterRegistration,
)
from gateway.review_answers import ReviewResult
from gateway.store.keys import KeyStore
from gateway.store.registrations import Registration
from gateway.web.request_body import read_bounded
from gateway.web.review_routes import entry_answer, json_answer, review_answer, review_answers, service_key_routes
from gateway.web.route_table import Answer, Operation, RouteTable

__all__ = ["AcceptBody", "adapter_review_table", "registry_routes"]


class AcceptBody(BaseModel):
    """Serve the proposal whose ``proposed_hash`` you reviewed."""

    model_config = ConfigDict(extra="forbid")

    hash: str
    acknowledge: list[str] = []
    """The settings the review called out (``diff.attention``: ``base_url``, ``credential``,
    ``signing_secret_env``), each named to say the change was seen; required when there are any."""


def _answer(result: ReviewResult[Registration], *, created: bool = False) -> JSONResponse:
    # A registration stored and quarantined until an admin accepts it is 202; one identical to what is served, 200.
    quarantined = result.entry is not None and result.entry.state != "active"
    status = 202 if created and quarantined else 200
    return review_answer(result, done=AdapterActionDone.of, refusal=AdapterError.of, done_status=status)


async def _json_body(request: Request) -> tuple[Any, str]:
    """The body as JSON, read within `MAX_MANIFEST_BYTES` while it streams, and ""; or None and the one
    sentence that says why it cannot be read (too large, not JSON, nested deeper than the parser follows)."""
    raw = await read_bounded(request, MAX_MANIFEST_BYTES)
    if raw is None:
        return None, f"body: larger than the {MAX_MANIFEST_BYTES} bytes a manifest may have"
    try:
        return json.loads(raw or b"{}"), ""
    except RecursionError:
        return None, "body: JSON nested too deeply to read"
    except ValueError as error:
        return None, f"body: not JSON ({error})"


class _Endpoints:
    def __init__(self, service: RegistryService, audit: AuditSink) -> None:
        self._service = service
        self._audit = audit

    async def _refused(self, request: Request, action: str, problem: str) -> Response:
        """A body refused before the registry service saw it: audited like every refusal."""
        who = principal_of(request.scope)
        await self._audit.record(
            AuditEvent.refusal(who, action, "VALIDATION_ERROR", problem, {"path": request.url.path})
        )
        return _answer(ReviewResult(code="VALIDATION_ERROR", problems=(problem,)))

    async def register(self, request: Request) -> Response:
        document, unreadable = await _json_body(request)
        if unreadable:
            return await self._refused(request, "registry.register", unreadable)
        if not isinstance(document, dict):
            return await self._refused(request, "registry.register", "body: a JSON object is required")
        result = await self._service.register(principal_of(request.scope), request.path_params["name"], document)
        return _answer(result, created=True)

    async def own_status(self, request: Request) -> Response:
        return _answer(await self._service.status(principal_of(request.scope), request.path_params["name"]))

    async def review(self, request: Request) -> Response:
        registrations = await self._service.review(principal_of(request.scope))
        if registrations is None:
            return _answer(ReviewResult(code="PERMISSION_DENIED"))
        return json_answer(200, AdapterList(adapters=[AdapterRegistration.from_registration(r) for r in registrations]))

    async def show(self, request: Request) -> Response:
        result = await self._service.show(principal_of(request.scope), request.path_params["name"])
        return entry_answer(result, view=AdapterRegistration.from_registration, otherwise=_answer)

    async def accept(self, request: Request) -> Response:
        document, unreadable = await _json_body(request)
        if unreadable:
            return await self._refused(request, "registry.accept", unreadable)
        try:
            body = AcceptBody.model_validate(document)
        except ValidationError:
            return await self._refused(request, "registry.accept", 'body: {"hash": <proposed_hash>} is required')
        admin = principal_of(request.scope)
        name = request.path_params["name"]
        accepted = await self._service.accept(
            admin, name, expected_hash=body.hash, acknowledged=frozenset(body.acknowledge)
        )
        return _answer(accepted)

    async def remove(self, request: Request) -> Response:
        return _answer(await self._service.remove(principal_of(request.scope), request.path_params["name"]))


_NOT_THEIRS = (
    "the admin has neither registry-operator nor the registry role of an org serving the adapter"
    " (the same whether or not it exists)"
)
_NOT_FOUND = "no such adapter"


def adapter_review_table(service: RegistryService, *, audit: AuditSink) -> RouteTable:
    """The admins' review of registered adapters, for `gateway.admin.api.admin_routes` to mount and document."""
    endpoints = _Endpoints(service, audit)
    return RouteTable(
        mount="/admin/api/adapters",
        operations=(
            Operation(
                method="GET",
                path="/",
                name="listAdapters",
                summary="The adapters this admin may manage, with their flags and diffs",
                endpoint=endpoints.review,
                answers=review_answers(
                    {200: Answer(description="the registrations this admin may manage", model=AdapterList)},
                    AdapterError,
                    denied="the admin has neither the registry nor the registry-operator role",
                ),
            ),
            Operation(
                method="GET",
                path="/{name}",
                name="showAdapter",
                summary="One adapter with its flags and diff",
                endpoint=endpoints.show,
                answers=review_answers(
                    {200: Answer(description="the registration", model=AdapterRegistration)},
                    AdapterError,
                    denied=_NOT_THEIRS,
                    not_found=_NOT_FOUND,
                ),
            ),
            Operation(
                method="DELETE",
                path="/{name}",
                name="removeAdapter",
                summary="Stop serving the adapter",
                endpoint=endpoints.remove,
                answers=review_answers(
                    {200: Answer(description="removed", model=AdapterActionDone)},
                    AdapterError,
                    denied=_NOT_THEIRS,
                    not_found=_NOT_FOUND,
                ),
            ),
            Operation(
                method="POST",
                path="/{name}/accept",
                name="acceptAdapter",
                summary="Pin and serve the proposal with the hash you reviewed",
                endpoint=endpoints.accept,
                body=AcceptBody,
                answers=review_answers(
                    {200: Answer(description="pinned; served next", model=AdapterActionDone)},
                    AdapterError,
                    denied=_NOT_THEIRS,
                    not_found="no such adapter, or nothing proposed",
                    conflict="the proposal changed since it was reviewed",
                    invalid='the body is not {"hash": ...}, or it does not acknowledge a called-out change',
                ),
            ),
        ),
    )


def registry_routes(
    service: RegistryService, *, keys: KeyStore, audit: AuditSink, floods: AddressBudgets
) -> list[BaseRoute]:
    """The services' routes, ``/registry/api``, behind a service key.

    They are built from a `RouteTable` like the admin routes, but no OpenAPI document is served
    for them: the admin API's describes ``/admin/api`` only, and serving one for services would
    be a new route.
    """
    endpoints = _Endpoints(service, audit)
    table = RouteTable(
        mount="/registry/api",
        operations=(
            Operation(
                method="PUT",
                path="/adapters/{name}",
                name="registerAdapter",
                summary="Register or change a manifest; quarantined until an admin accepts it",
                endpoint=endpoints.register,
                answers=review_answers(
                    {
                        200: Answer(description="identical to what is served", model=AdapterActionDone),
                        202: Answer(description="stored, quarantined", model=AdapterActionDone),
                    },
                    AdapterError,
                    denied="another service owns (or has just claimed) the name",
                    invalid="every problem of the manifest",
                ),
            ),
            Operation(
                method="GET",
                path="/adapters/{name}",
                name="ownAdapter",
                summary="The service's registration",
                endpoint=endpoints.own_status,
                answers=review_answers(
                    {200: Answer(description="the registration", model=AdapterActionDone)},
                    AdapterError,
                    not_found="no such adapter of this service",
                ),
            ),
        ),
    )
    return service_key_routes(table, _error_body, keys=keys, audit=audit, floods=floods)


def _error_body(status: int, code: str, message: str) -> Response:
    return json_answer(status, AdapterError(error=AdapterErrorDetail(code=code, message=message)))
