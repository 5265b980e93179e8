"""How a registry admin's review is served over HTTP, for both kinds of backend a service brings: the routes of
registered adapters (`gateway.registry.api`) and those of fronted MCP servers (`gateway.upstreams.api`).

Both answer a `ReviewResult` alike (`review_answer`, `entry_answer`), document each refusal at the status
`REVIEW_STATUS` gives its code (`review_answers`), so a table cannot document a status the route never answers
with, and serve services behind a service key alike (`service_key_routes`). Each passes its own body models: the
two reviews' bodies differ in name and fields, not in how they are chosen. This module decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from gateway.audit.events import AuditSink
from gateway.auth.bearer import BearerAuth, caller_of
from gateway.codes import Code
from gateway.limits.rate_limiter import AddressBudgets
from gateway.principal import KeyKind
from gateway.review_answers import REVIEW_STATUS, ReviewResult
from gateway.store.keys import KeyStore
from gateway.web.route_table import Answer, RouteTable, error_handler, mount

__all__ = ["entry_answer", "json_answer", "review_answer", "review_answers", "service_key_routes"]

Answered = TypeVar("Answered")


def json_answer(status: int, body: BaseModel) -> JSONResponse:
    """`body` as its model serialises it to JSON, with `status`."""
    return JSONResponse(body.model_dump(mode="json"), status_code=status)


def review_answer(
    result: ReviewResult[Answered],
    *,
    done: Callable[[ReviewResult[Answered]], BaseModel],
    refusal: Callable[[ReviewResult[Answered]], BaseModel],
    done_status: int = 200,
) -> JSONResponse:
    """How a review's route answers `result`: `done(result)` with `done_status` when it went through, otherwise
    `refusal(result)` with the status `REVIEW_STATUS` gives its code."""
    if result.ok:
        return json_answer(done_status, done(result))
    return json_answer(REVIEW_STATUS[result.code], refusal(result))


def entry_answer(
    result: ReviewResult[Answered],
    *,
    view: Callable[[Answered], BaseModel],
    otherwise: Callable[[ReviewResult[Answered]], JSONResponse],
) -> JSONResponse:
    """How a route that shows one entry answers `result`: the entry as `view` renders it (200) when it went through
    with one, otherwise as `otherwise` answers the result."""
    if result.ok and result.entry is not None:
        return json_answer(200, view(result.entry))
    return otherwise(result)


def review_answers(
    done: Mapping[int, Answer],
    refusal: type[BaseModel],
    *,
    denied: str = "",
    not_found: str = "",
    conflict: str = "",
    invalid: str = "",
) -> dict[int, Answer]:
    """The documented answers of a review's route, by status: `done` as given, and each refusal it can answer,
    described, with `refusal` as its body, at the status `REVIEW_STATUS` gives its code: `denied` for
    PERMISSION_DENIED, `not_found` for NOT_FOUND, `conflict` for CONFLICT and `invalid` for VALIDATION_ERROR
    ("": the route never answers it)."""
    refused = {
        Code.PERMISSION_DENIED: denied,
        Code.NOT_FOUND: not_found,
        Code.CONFLICT: conflict,
        Code.VALIDATION_ERROR: invalid,
    }
    answers = dict(done)
    for code, description in refused.items():
        if description:
            answers[REVIEW_STATUS[code]] = Answer(description=description, model=refusal)
    return dict(sorted(answers.items()))


def service_key_routes(
    table: RouteTable,
    error_body: Callable[[int, str, str], Response],
    *,
    keys: KeyStore,
    audit: AuditSink,
    floods: AddressBudgets,
) -> list[BaseRoute]:
    """`table` mounted behind a service key (realm ``registry``), answering what no route answers with
    `error_body(status, code, message)`: how the registry API serves services, for their adapters and their MCP
    servers."""
    handle = error_handler(audit, error_body, caller=caller_of)
    app = table.app(exception_handlers={HTTPException: handle, Exception: handle})
    guarded = BearerAuth(app, keys=keys, kind=KeyKind.SERVICE, audit=audit, realm="registry", floods=floods)
    return [mount(table.mount, guarded)]
