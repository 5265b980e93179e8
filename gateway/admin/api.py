"""The admin REST API: JSON over HTTP for reading and deciding cards, under ``/admin/api``.

Who calls it: the composition root mounts `admin_routes(...)`; admins' tools (the console, scripts)
call it with an admin bearer key. It translates and decides nothing: request bodies are validated
with pydantic models (unknown fields refused), every action goes to `CardService`, and each
`ResultCode` becomes one status:

========================  ======
OK                        200
NOT_FOUND                 404  (a card of another org answers exactly as a missing one)
PERMISSION_DENIED         403
CONFLICT                  409  (the body holds the current card)
VALIDATION_ERROR          422  (the body lists the problems)
LEDGER_UNAVAILABLE        503
missing or non-admin key  401  (from `BearerAuth`, before any route runs)
========================  ======

Two routes answer otherwise: ``POST /cards/decisions`` answers 200 with one `ResultCode` per card once
the list is taken (422 when it is refused whole: `gateway.approvals.batch`), and ``GET /cards/events`` is a
stream of server-sent events (`gateway.admin.events`).

Every route under ``/admin/api`` is a row of a `RouteTable`: the card routes below, and the
tables `admin_routes` is given (the adapter review of `gateway.registry.api`). ``openapi.json`` is
generated from those same rows and the pydantic models of `gateway.admin.bodies`, and every body
is sent as its model's ``model_dump(mode="json")``, so a route cannot be served undocumented and a
schema cannot drift from the bytes. Error bodies are `AdminError`:
``{"error": {"code", "message", "problems"?}, "card"?}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from gateway.admin.answers import STATUS, answer, error, problems, refuse_invalid, store_guarded, with_body
from gateway.admin.bodies import (
    AdminError,
    AdminErrorDetail,
    ApproveBody,
    CancelBody,
    CardActionDone,
    CardList,
    CardShown,
    DecisionResult,
    DecisionsBody,
    DecisionsDone,
    ListQuery,
    OverviewQuery,
    RejectBody,
    ResolveBody,
)
from gateway.admin.events import card_events
from gateway.approvals.batch import BatchItem, decide_batch
from gateway.approvals.service import CardService
from gateway.audit.events import AuditSink
from gateway.auth.bearer import BEARER_ANSWERS, BearerAuth, caller_of, principal_of
from gateway.auth.tokens import TokenVerifier
from gateway.cards.overview import Overview
from gateway.cards.views import CardActionResult, ResultCode
from gateway.limits.rate_limiter import AddressBudgets
from gateway.principal import KeyKind, Principal
from gateway.store.keys import KeyStore
from gateway.web.route_table import (
    Answer,
    Endpoint,
    Operation,
    RouteTable,
    error_handler,
    mount,
    openapi_document,
    serve,
)

__all__ = ["PREFIX", "admin_routes"]

PREFIX = "/admin/api"


def _result(result: CardActionResult) -> JSONResponse:
    status = STATUS[result.code]
    if not result.ok:
        detail = AdminErrorDetail(code=result.code.value, message=result.message, problems=list(result.problems))
        return answer(status, AdminError(error=detail, card=result.card_view))
    if result.card_view is None:
        raise RuntimeError("the card service answered OK without the card")
    return answer(status, CardActionDone(code="OK", message=result.message, card=result.card_view))


# -- endpoints ------------------------------------------------------------------------------------

BackendHealth = Callable[[], Mapping[str, bool]]
"""Each configured backend's health as the gateway's checks last found it (`AdapterHealth.report`)."""

Action = Callable[[CardService, Principal, str, Any], Awaitable[CardActionResult]]


class _Endpoints:
    def __init__(self, service: CardService, audit: AuditSink, backends: BackendHealth | None) -> None:
        self.service = service
        self._audit = audit
        self._backends = backends

    async def list_cards(self, request: Request) -> Response:
        try:
            query = ListQuery.model_validate(dict(request.query_params))
        except ValidationError as invalid:
            return await refuse_invalid(self._audit, request, problems(invalid), "invalid query")
        listing = await self.service.page(
            principal_of(request.scope),
            state=query.state,
            tool=query.tool,
            requester=query.requester,
            limit=query.limit,
            cursor=query.cursor,
        )
        if not listing.ok:  # a cursor the ledger did not issue (the service audited it)
            return error(listing.code, "invalid cursor", status=STATUS[listing.code], problems=listing.problems)
        return answer(200, CardList(cards=list(listing.cards), next_cursor=listing.next_cursor))

    async def overview(self, request: Request) -> Response:
        try:
            query = OverviewQuery.model_validate(dict(request.query_params))
        except ValidationError as invalid:
            return await refuse_invalid(self._audit, request, problems(invalid), "invalid query")
        backends = self._backends() if self._backends is not None else None
        return answer(200, await self.service.overview(principal_of(request.scope), query.window, backends=backends))

    async def show_card(self, request: Request) -> Response:
        view = await self.service.show(principal_of(request.scope), request.path_params["card_id"])
        if view is None:
            return error(ResultCode.NOT_FOUND, "no such card", status=404)
        return answer(200, CardShown(card=view))

    async def _decide_many(self, request: Request, body: DecisionsBody) -> Response:
        items = [
            BatchItem(card_id=d.card_id, decision=d.decision, version=d.version, args_hash=d.args_hash, reason=d.reason)
            for d in body.decisions
        ]
        outcome = await decide_batch(self.service, self._audit, principal_of(request.scope), items)
        if not outcome.ok:
            return error(outcome.code, outcome.message, status=STATUS[outcome.code], problems=outcome.problems)
        results = [
            DecisionResult(
                card_id=item.card_id,
                decision=item.decision,
                code=result.code.value,
                message=result.message,
                state=result.card_view.state if result.card_view else None,
                version=result.card_view.version if result.card_view else None,
            )
            for item, result in zip(items, outcome.results, strict=True)
        ]
        return answer(200, DecisionsDone(code="OK", message=outcome.message, results=results))

    def decide_many(self) -> Endpoint:
        return with_body(DecisionsBody, self._audit, self._decide_many)

    def action(self, model: type[BaseModel], call: Action) -> Endpoint:
        async def act(request: Request, body: BaseModel) -> Response:
            admin = principal_of(request.scope)
            return _result(await call(self.service, admin, request.path_params["card_id"], body))

        return with_body(model, self._audit, act)


async def _approve(service: CardService, admin: Principal, card_id: str, body: ApproveBody) -> CardActionResult:
    return await service.approve(
        admin, card_id, version=body.version, args_hash=body.args_hash, comment=body.comment, passkey=body.passkey
    )


async def _reject(service: CardService, admin: Principal, card_id: str, body: RejectBody) -> CardActionResult:
    return await service.reject(admin, card_id, reason=body.reason, version=body.version, args_hash=body.args_hash)


async def _cancel(service: CardService, admin: Principal, card_id: str, body: CancelBody) -> CardActionResult:
    return await service.cancel(admin, card_id)


async def _resolve(service: CardService, admin: Principal, card_id: str, body: ResolveBody) -> CardActionResult:
    return await service.resolve(admin, card_id, outcome=body.outcome, evidence=body.evidence)


# -- the route table ------------------------------------------------------------------------------

_NOT_FOUND = Answer(description="no such card (or a card of another org)", model=AdminError)
_UNAVAILABLE = Answer(
    description="the ledger is unreachable or not durable: nothing changed, or (with the card in the answer) "
    "the decision was recorded but not confirmed durable; check the card",
    model=AdminError,
)
_SECURITY = {"adminKey": {"type": "http", "scheme": "bearer", "description": "an admin key (csk_admin_...)"}}


def _decision(endpoints: _Endpoints, verb: str, summary: str, body: type[BaseModel], call: Action) -> Operation:
    return Operation(
        method="POST",
        path=f"/cards/{{card_id}}/{verb}",
        name=f"{verb}Card",
        summary=summary,
        endpoint=endpoints.action(body, call),
        body=body,
        body_required=body is not CancelBody,
        answers={
            200: Answer(description="done; the card as it is now", model=CardActionDone),
            403: Answer(
                description="the requester itself, the admin lacks the approver role, or the card needs the "
                "approver's passkey and the assertion is missing (PASSKEY_REQUIRED) or did not verify "
                "(PASSKEY_INVALID)",
                model=AdminError,
            ),
            404: _NOT_FOUND,
            409: Answer(
                description="stale version or args_hash, wrong state, same approver twice, expired", model=AdminError
            ),
            422: Answer(description="the body is invalid", model=AdminError),
            503: _UNAVAILABLE,
        },
    )


def _card_table(endpoints: _Endpoints, openapi: Endpoint) -> RouteTable:
    settle = "Settle a NEEDS_RECONCILIATION card as SUCCEEDED or FAILED, with evidence"
    return RouteTable(
        mount=PREFIX,
        operations=(
            Operation(
                method="GET",
                path="/openapi.json",
                name="openapi",
                summary="This document",
                endpoint=openapi,
                answers={200: Answer(description="OpenAPI 3.1")},
            ),
            Operation(
                method="GET",
                path="/cards",
                name="listCards",
                summary="Cards of the admin's org, newest first, one page at a time",
                endpoint=store_guarded(endpoints.list_cards),
                query=ListQuery,
                answers={
                    200: Answer(description="a page of the matching cards, and the cursor of the next", model=CardList),
                    422: Answer(description="invalid query, or a cursor this list did not issue", model=AdminError),
                    503: _UNAVAILABLE,
                },
            ),
            Operation(
                method="GET",
                path="/cards/events",
                name="cardEvents",
                summary="Server-sent events: the list row of every card of the org that changes, as it changes",
                endpoint=card_events(endpoints.service),
                answers={
                    200: Answer(description="text/event-stream: `ready`, then one `card` event per change"),
                    503: Answer(description="no live updates now (Redis unreachable): poll the list", model=AdminError),
                },
            ),
            Operation(
                method="GET",
                path="/overview",
                name="overview",
                summary="The org's cards at a glance: per hour by outcome, time to approval, open cards by age, "
                "writes by outcome, worker lag, backend health (what the console's overview draws)",
                endpoint=store_guarded(endpoints.overview),
                query=OverviewQuery,
                answers={
                    200: Answer(description="the numbers of every chart", model=Overview),
                    422: Answer(description="invalid query", model=AdminError),
                    503: _UNAVAILABLE,
                },
            ),
            Operation(
                method="POST",
                path="/cards/decisions",
                name="decideCards",
                summary="Decide several reviewed cards, each bound to its version and args_hash, each on its own",
                endpoint=endpoints.decide_many(),
                body=DecisionsBody,
                answers={
                    200: Answer(description="one result per decision, in order (OK or its code)", model=DecisionsDone),
                    422: Answer(description="invalid body, empty, over the limit, or a card twice", model=AdminError),
                },
            ),
            Operation(
                method="GET",
                path="/cards/{card_id}",
                name="showCard",
                summary="One card with its full, hash-chained history",
                endpoint=store_guarded(endpoints.show_card),
                answers={200: Answer(description="the card", model=CardShown), 404: _NOT_FOUND, 503: _UNAVAILABLE},
            ),
            _decision(endpoints, "approve", "Approve the card as reviewed (version, args_hash)", ApproveBody, _approve),
            _decision(endpoints, "reject", "Veto the card, with a reason", RejectBody, _reject),
            _decision(endpoints, "cancel", "Cancel a PENDING or APPROVED card", CancelBody, _cancel),
            _decision(endpoints, "resolve", settle, ResolveBody, _resolve),
        ),
    )


def admin_routes(
    service: CardService,
    tokens: TokenVerifier | None = None,
    *,
    keys: KeyStore,
    audit: AuditSink,
    floods: AddressBudgets,
    tables: Sequence[RouteTable] = (),
    backends: BackendHealth | None = None,
    sessions: Callable[[ASGIApp, ASGIApp], ASGIApp] | None = None,
) -> list[BaseRoute]:
    """The admin API: the card routes and `tables`, every route behind an admin key, one document for all.

    `tables` (mounted under ``/admin/api``, such as the adapter review) and the card routes are
    served by one app behind one key check, so every path under ``/admin/api`` (a card id holding
    an encoded newline included) answers JSON: 404 NOT_FOUND for a path no route matches, 405
    METHOD_NOT_ALLOWED with an Allow header for a wrong method, 500 INTERNAL_ERROR for a bug. openapi.json is
    behind the key too: it holds no secret, but the admin surface tells a caller without an admin
    key nothing at all, and every legitimate consumer of it holds one. With `tokens`, an admin's
    access token of an issuer that mints for the admin API opens it too (roles from its claims).
    `backends` feeds the overview's backend health; without it the overview reports none. `sessions`
    wraps the app and the bearer check in front of it (`gateway.signin.cookies.SessionAuth`), so the console
    of a signed-in approver opens the API with its session cookie instead of a key.

    Raises:
        ValueError: a table mounted outside ``/admin/api``, or one method and path declared twice.
    """
    document: dict[str, Any] = {}

    async def openapi(request: Request) -> Response:
        return answer(200, document)

    cards = _card_table(_Endpoints(service, audit, backends), openapi)
    every = [*tables, cards]
    document.update(
        openapi_document(
            title="Countersign admin API", server=PREFIX, tables=every, security=_SECURITY, common=BEARER_ANSWERS
        )
    )

    def guarded(app: ASGIApp) -> BearerAuth:
        return BearerAuth(app, keys=keys, kind=KeyKind.ADMIN, audit=audit, realm="admin", floods=floods, tokens=tokens)

    handle = error_handler(audit, lambda status, code, message: error(code, message, status=status), caller=caller_of)
    app = serve(every, mount=PREFIX, exception_handlers={HTTPException: handle, Exception: handle})
    bearer = guarded(app)
    return [mount(PREFIX, sessions(app, bearer) if sessions is not None else bearer)]
