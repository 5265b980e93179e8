"""The admins' review of fronted MCP servers over HTTP, beside the registry's review of adapters.

``GET /admin/api/upstreams/`` lists the upstreams the admin may review, each with the tools it lists now (served
or quarantined, why, the upstream's annotations as suggestions, and for a changed definition the diff);
``GET /admin/api/upstreams/{name}`` shows one; ``PUT /admin/api/upstreams/{name}/tools/{tool}`` stores the admin's
review of one tool, a `ToolReview` naming the ``listed_hash`` they read (409 when the upstream lists another
definition since); ``PUT /admin/api/upstreams/{name}/registration`` fronts a server its service registered again
at another URL or with another credential, once an admin names it and acknowledges each change. The admin API
mounts `upstream_review_table` behind the admin key and lists it in its openapi.json. It translates and decides
nothing: `UpstreamReviews` does. Error bodies are `ToolReviewRefusal`.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from gateway.audit.events import AuditSink
from gateway.auth.bearer import principal_of
from gateway.config.upstreams import ToolReview, UpstreamSection
from gateway.limits.rate_limiter import AddressBudgets
from gateway.review_answers import ReviewResult
from gateway.store.keys import KeyStore
from gateway.upstreams.tool_reviews import RegistrationAcceptance, UpstreamReviews
from gateway.upstreams.views import (
    FrontedServer,
    FrontedServerList,
    ToolReviewDone,
    ToolReviewRefusal,
    ToolReviewRefusalDetail,
)
from gateway.web.request_body import read_bounded
from gateway.web.review_routes import entry_answer, json_answer, review_answer, review_answers, service_key_routes
from gateway.web.route_table import Answer, Operation, RouteTable

__all__ = ["upstream_registration_routes", "upstream_review_table"]

MAX_REVIEW_BYTES = 64 * 1024


def _answer(result: ReviewResult[FrontedServer]) -> JSONResponse:
    return review_answer(result, done=ToolReviewDone.of, refusal=ToolReviewRefusal.of)


class _Endpoints:
    def __init__(self, reviews: UpstreamReviews) -> None:
        self._reviews = reviews

    async def overview(self, request: Request) -> Response:
        upstreams = await self._reviews.overview(principal_of(request.scope))
        if upstreams is None:
            return _answer(ReviewResult(code="PERMISSION_DENIED", message="reviewing needs the registry role"))
        return json_answer(200, FrontedServerList(upstreams=upstreams))

    async def show(self, request: Request) -> Response:
        result = await self._reviews.show(principal_of(request.scope), request.path_params["name"])
        return entry_answer(result, view=lambda upstream: upstream, otherwise=_answer)

    async def review(self, request: Request) -> Response:
        document = await _document(request)
        admin = principal_of(request.scope)
        name, tool = request.path_params["name"], request.path_params["tool"]
        return _answer(await self._reviews.accept(admin, name, tool, document))

    async def accept_registration(self, request: Request) -> Response:
        document = await _document(request)
        admin = principal_of(request.scope)
        return _answer(await self._reviews.accept_registration(admin, request.path_params["name"], document))

    async def register(self, request: Request) -> Response:
        document = await _document(request)
        service = principal_of(request.scope)
        return _answer(await self._reviews.register(service, request.path_params["name"], document))


async def _document(request: Request) -> Any:
    """The body as JSON, read within `MAX_REVIEW_BYTES`; None when it is larger or not JSON (then refused by the
    validation that follows, audited there like every refusal)."""
    raw = await read_bounded(request, MAX_REVIEW_BYTES)
    try:
        return None if raw is None else json.loads(raw or b"null")
    except (ValueError, RecursionError):
        return None


_NOT_THEIRS = (
    "the admin has neither registry-operator nor the registry role of an org serving the upstream"
    " (the same whether or not it exists)"
)


def upstream_review_table(reviews: UpstreamReviews) -> RouteTable:
    """The admins' review of fronted MCP servers, for `gateway.admin.api.admin_routes` to mount and document."""
    endpoints = _Endpoints(reviews)
    return RouteTable(
        mount="/admin/api/upstreams",
        operations=(
            Operation(
                method="GET",
                path="/",
                name="listUpstreams",
                summary="The fronted MCP servers this admin may review, with their tools, quarantined or served",
                endpoint=endpoints.overview,
                answers=review_answers(
                    {200: Answer(description="the upstreams this admin may review", model=FrontedServerList)},
                    ToolReviewRefusal,
                    denied="the admin has neither the registry nor the registry-operator role",
                ),
            ),
            Operation(
                method="GET",
                path="/{name}",
                name="showUpstream",
                summary="One fronted MCP server with its tools, their suggestions and diffs",
                endpoint=endpoints.show,
                answers=review_answers(
                    {200: Answer(description="the upstream", model=FrontedServer)},
                    ToolReviewRefusal,
                    denied=_NOT_THEIRS,
                    not_found="no such upstream",
                ),
            ),
            Operation(
                method="PUT",
                path="/{name}/tools/{tool}",
                name="reviewUpstreamTool",
                summary="Classify one listed tool (read, write or hidden) as listed now, naming the hash you read",
                endpoint=endpoints.review,
                body=ToolReview,
                answers=review_answers(
                    {200: Answer(description="stored; served as reviewed from the next reading", model=ToolReviewDone)},
                    ToolReviewRefusal,
                    denied=_NOT_THEIRS,
                    not_found="no such upstream, or it does not list the tool",
                    conflict="the upstream lists another definition than the one reviewed",
                    invalid="the body is not a review (every problem listed)",
                ),
            ),
            Operation(
                method="PUT",
                path="/{name}/registration",
                name="acceptUpstreamRegistration",
                summary="Front the server a service registered again at another URL or with another credential,"
                " naming its proposed_hash and acknowledging each changed setting",
                endpoint=endpoints.accept_registration,
                body=RegistrationAcceptance,
                answers=review_answers(
                    {200: Answer(description="fronted as registered now, from the next reading", model=ToolReviewDone)},
                    ToolReviewRefusal,
                    denied=_NOT_THEIRS,
                    not_found="no registration of that upstream waits",
                    conflict="registered again since the hash named",
                    invalid="not an acceptance, or the changed settings not all acknowledged",
                ),
            ),
        ),
    )


def upstream_registration_routes(
    reviews: UpstreamReviews, *, keys: KeyStore, audit: AuditSink, floods: AddressBudgets
) -> list[BaseRoute]:
    """``PUT /registry/api/upstreams/{name}`` behind a service key: a service registers its own MCP server (HTTP,
    to a URL the operator's registry allowlist admits, secrets by reference in its own namespace, no reviews). Its
    tools are quarantined until a registry admin reviews them. Mount it before the registry's ``/registry/api``."""
    endpoints = _Endpoints(reviews)
    table = RouteTable(
        mount="/registry/api/upstreams",
        operations=(
            Operation(
                method="PUT",
                path="/{name}",
                name="registerUpstream",
                summary="Register the service's MCP server; its tools are quarantined until an admin reviews them",
                endpoint=endpoints.register,
                body=UpstreamSection,
                answers=review_answers(
                    {
                        200: Answer(
                            description="stored; connected from the next poll (a new URL or credential of a registered"
                            " server only once a registry admin accepts it)",
                            model=ToolReviewDone,
                        )
                    },
                    ToolReviewRefusal,
                    denied="another service or the operator owns the name",
                    invalid="every problem of the registration",
                ),
            ),
        ),
    )
    return service_key_routes(table, _error_body, keys=keys, audit=audit, floods=floods)


def _error_body(status: int, code: str, message: str) -> Response:
    return json_answer(status, ToolReviewRefusal(error=ToolReviewRefusalDetail(code=code, message=message)))
