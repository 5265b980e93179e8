"""The registry API: services register manifests, admins review and pin them.

``PUT /registry/api/adapters/{name}`` (service key) registers or changes a manifest: 422 lists
every problem; 202 means "stored, quarantined until an admin accepts it"; 200 means "identical to
what is served". ``GET /registry/api/adapters/{name}`` shows the service its own registration.

Admins (admin key with the ``registry`` role) use ``GET /admin/api/adapters`` (every adapter with
its state, safety flags and the diff between pinned and proposed), ``GET /admin/api/adapters/{name}``,
``POST /admin/api/adapters/{name}/accept`` with ``{"hash": <proposed_hash reviewed>}``, and
``DELETE /admin/api/adapters/{name}``. It translates and decides nothing: `RegistryService` does.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Mount, Route

from gateway.audit import AuditEvent, AuditSink
from gateway.auth import BearerAuth, principal_of
from gateway.principal import KeyKind
from gateway.registry.service import RegistryResult, RegistryService
from gateway.store.keys import KeyStore

__all__ = ["registry_routes"]

MAX_MANIFEST_BYTES = 512 * 1024
_STATUS = {"OK": 200, "VALIDATION_ERROR": 422, "PERMISSION_DENIED": 403, "NOT_FOUND": 404, "CONFLICT": 409}


class AcceptBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hash: str


def _answer(result: RegistryResult, *, created: bool = False) -> JSONResponse:
    if not result.ok:
        error: dict[str, Any] = {"code": result.code, "message": result.message or result.code.lower()}
        if result.problems:
            error["problems"] = list(result.problems)
        body: dict[str, Any] = {"error": error}
        if result.registration is not None:
            body["adapter"] = result.registration.to_json()
        return JSONResponse(body, status_code=_STATUS[result.code])
    registration = result.registration
    body = {"message": result.message, "adapter": registration.to_json() if registration else None}
    quarantined = registration is not None and registration.state != "active"
    return JSONResponse(body, status_code=202 if created and quarantined else 200)


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if len(raw) > MAX_MANIFEST_BYTES:
        return None
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        return None


def registry_routes(service: RegistryService, *, keys: KeyStore, audit: AuditSink) -> list[BaseRoute]:
    """Routes for services (`/registry/api`) and for reviewing admins (`/admin/api/adapters`)."""

    async def refused(request: Request, action: str, problem: str) -> JSONResponse:
        """A body refused before the registry service saw it: audited like every refusal."""
        who = principal_of(request.scope)
        await audit.record(AuditEvent.refusal(who, action, "VALIDATION_ERROR", problem, {"path": request.url.path}))
        return _answer(RegistryResult(code="VALIDATION_ERROR", problems=(problem,)))

    async def register(request: Request) -> JSONResponse:
        document = await _json_body(request)
        if not isinstance(document, dict):
            return await refused(request, "registry.register", "body: a JSON object is required")
        result = await service.register(principal_of(request.scope), request.path_params["name"], document)
        return _answer(result, created=True)

    async def own_status(request: Request) -> JSONResponse:
        return _answer(await service.status(principal_of(request.scope), request.path_params["name"]))

    async def review(request: Request) -> JSONResponse:
        registrations = await service.review(principal_of(request.scope))
        if registrations is None:
            return _answer(RegistryResult(code="PERMISSION_DENIED"))
        return JSONResponse({"adapters": [r.to_json() for r in registrations]})

    async def show(request: Request) -> JSONResponse:
        registrations = await service.review(principal_of(request.scope))
        if registrations is None:
            return _answer(RegistryResult(code="PERMISSION_DENIED"))
        found = [r for r in registrations if r.name == request.path_params["name"]]
        return JSONResponse(found[0].to_json()) if found else _answer(RegistryResult(code="NOT_FOUND"))

    async def accept(request: Request) -> JSONResponse:
        try:
            body = AcceptBody.model_validate(await _json_body(request))
        except ValidationError:
            return await refused(request, "registry.accept", 'body: {"hash": <proposed_hash>} is required')
        admin = principal_of(request.scope)
        return _answer(await service.accept(admin, request.path_params["name"], expected_hash=body.hash))

    async def remove(request: Request) -> JSONResponse:
        return _answer(await service.remove(principal_of(request.scope), request.path_params["name"]))

    services = Starlette(
        routes=[Route("/adapters/{name}", register, methods=["PUT"]), Route("/adapters/{name}", own_status)]
    )
    admins = Starlette(
        routes=[
            Route("/", review),
            Route("/{name}", show),
            Route("/{name}", remove, methods=["DELETE"]),
            Route("/{name}/accept", accept, methods=["POST"]),
        ]
    )
    return [
        Mount("/registry/api", BearerAuth(services, keys=keys, kind=KeyKind.SERVICE, audit=audit, realm="registry")),
        Mount("/admin/api/adapters", BearerAuth(admins, keys=keys, kind=KeyKind.ADMIN, audit=audit, realm="admin")),
    ]
