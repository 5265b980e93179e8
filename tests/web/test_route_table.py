"""Route tables: one declaration gives both the Starlette routes and the OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.web.route_table import Answer, Operation, RouteTable, openapi_document


class Thing(BaseModel):
    name: str


class Oops(BaseModel):
    reason: str


class Filters(BaseModel):
    color: str | None = None
    limit: int = 10


async def _endpoint(request: Request) -> Response:
    return JSONResponse({"name": "x"})


def _operation(**changes: Any) -> Operation:
    ok = {200: Answer(description="ok", model=Thing)}
    fields: dict[str, Any] = {"method": "GET", "path": "/", "name": "listThings", "summary": "Things",
                              "endpoint": _endpoint, "answers": ok}  # fmt: skip
    return Operation(**{**fields, **changes})


def _document(*tables: RouteTable, common: dict[int, Answer] | None = None) -> dict[str, Any]:
    security = {"key": {"type": "http", "scheme": "bearer"}}
    return openapi_document(title="Things", server="/api", tables=tables, security=security, common=common or {})


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def test_a_route_or_operation_name_declared_twice_is_refused_at_construction() -> None:
    """Two rows for one method and path, or two rows with one operationId, cannot make a table."""
    with pytest.raises(ValueError):
        RouteTable(mount="/api", operations=(_operation(), _operation(name="again")))
    with pytest.raises(ValueError):
        RouteTable(mount="/api", operations=(_operation(), _operation(path="/other")))


def test_an_operation_needs_an_answer_and_plain_path_parameters() -> None:
    """No documented answer, or a Starlette converter the document cannot describe, is refused."""
    with pytest.raises(ValueError):
        _operation(answers={})
    with pytest.raises(ValueError):
        _operation(path="/{thing_id:int}")


def test_tables_may_not_overlap_or_sit_outside_the_documented_server() -> None:
    """The same path served by two tables, or a table mounted elsewhere, cannot be documented."""
    things = RouteTable(mount="/api", operations=(_operation(path="/things/"),))
    nested = RouteTable(mount="/api/things", operations=(_operation(name="listNested"),))
    with pytest.raises(ValueError):
        _document(things, nested)
    with pytest.raises(ValueError):
        _document(RouteTable(mount="/apis", operations=(_operation(),)))


def test_the_document_is_generated_from_the_rows_and_their_models() -> None:
    """Paths, parameters, bodies and answers come from the table; common answers merge into each operation."""
    table = RouteTable(
        mount="/api/things",
        operations=(
            _operation(query=Filters, answers={200: Answer(description="ok", model=Thing),
                                               503: Answer(description="down", model=Oops)}),
            _operation(method="POST", path="/{thing_id}", name="renameThing", body=Thing, body_required=False),
        ),
    )  # fmt: skip
    document = _document(table, common={401: Answer(description="no key"), 503: Answer(description="no store")})
    assert set(document["paths"]) == {"/things/", "/things/{thing_id}"}
    listing, rename = document["paths"]["/things/"]["get"], document["paths"]["/things/{thing_id}"]["post"]
    assert [(p["name"], p["in"], p["required"]) for p in listing["parameters"]] == [
        ("color", "query", False),
        ("limit", "query", False),
    ]
    assert listing["responses"]["401"] == {"description": "no key"}
    assert listing["responses"]["503"] == {
        "description": "down; or no store",
        "content": {"application/json": {"schema": _ref("Oops")}},
    }
    assert rename["parameters"] == [{"name": "thing_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    assert rename["requestBody"] == {"required": False, "content": {"application/json": {"schema": _ref("Thing")}}}
    assert document["components"]["schemas"]["Thing"]["required"] == ["name"]
    assert document["security"] == [{"key": []}]


def test_two_body_models_for_one_status_are_documented_as_either() -> None:
    """When the operation and the wrapper both answer a status with a body, the schema is anyOf the two."""
    table = RouteTable(mount="/api", operations=(_operation(answers={503: Answer(description="down", model=Oops)}),))
    document = _document(table, common={503: Answer(description="no store", model=Thing)})
    schema = document["paths"]["/"]["get"]["responses"]["503"]["content"]["application/json"]["schema"]
    assert schema == {"anyOf": [_ref("Oops"), _ref("Thing")]}


def test_the_app_serves_one_route_per_path_with_the_methods_of_its_rows() -> None:
    """Rows of one path become one Starlette route with all their methods (and HEAD for GET), so a 405 allows all."""
    table = RouteTable(mount="/api", operations=(_operation(), _operation(method="DELETE", name="removeThings")))
    routes = [route for route in table.app().routes if isinstance(route, Route)]
    assert [(route.path, route.methods) for route in routes] == [("/", {"GET", "HEAD", "DELETE"})]
