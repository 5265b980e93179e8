"""The official conformance suite's fixture tools, offered as ordinary gateway tools, and their backend.

The suite's server scenarios call tools by fixed names (``test_simple_text``, ``test_error_handling``,
``json_schema_2020_12_tool``...; see its ``examples/servers/typescript/everything-server.ts``). Here
they are declared like any adapter's tools: closed input models, declared access, read mode. Calls go
through the executor like every other (access check, audit, input and output validation, seal), and
the ones that need a backend answer reach a real Starlette backend over HTTP with the caller's signed
identity, so a conformance run exercises the gateway as deployed rather than a side door.

Only the fixtures whose behaviour the gateway can offer are here. What it deliberately does not
offer (media content, progress, logging, sampling, elicitation, resources, prompts...) is listed with
its reason in ``tests/data/conformance-expected-failures.yml``.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway import Access, Mode, Tool, ToolContext, request_json

__all__ = ["ADAPTERS", "SIMPLE_TEXT", "TOOLS", "create_fixture_backend"]

SIMPLE_TEXT = "This is a simple text response for testing."

ADAPTERS = ("test", "json")
"""Tool names are prefixed by their adapter; the suite's names fix these two."""


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoArguments(_Closed):
    pass


class HeaderArgs(_Closed):
    value: str = Field(
        max_length=200,
        description="Any text; mirrored into the Mcp-Param-Value header.",
        json_schema_extra={"x-mcp-header": "Value"},
    )


# The suite checks that tools/list carries these JSON Schema 2020-12 keywords verbatim.
_JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


class ContactArgs(_Closed):
    """Validates what the published 2020-12 schema states; the catalog lists that schema verbatim."""

    name: str | None = None
    address: dict[str, Any] | None = None
    contactMethod: Literal["phone", "email"] | None = None  # noqa: N815 (the suite's field name)
    phone: str | None = None
    email: str | None = None

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # Pydantic cannot emit $anchor or if/then/else; the schema is written out, the rules below match it.
        return copy.deepcopy(_JSON_SCHEMA_2020_12)

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        # Every listed field is typed without null; absent and null are different things there.
        if isinstance(data, dict) and any(value is None for value in data.values()):
            raise ValueError("no field takes null")
        return data

    @model_validator(mode="after")
    def _reachable(self) -> ContactArgs:
        given = self.model_fields_set
        if not {"phone", "email"} & given:
            raise ValueError("give a phone or an email")
        if ("phone" if self.contactMethod == "phone" else "email") not in given:
            raise ValueError("the chosen contact method needs its field")
        if any(not isinstance((self.address or {}).get(part, ""), str) for part in ("street", "city")):
            raise ValueError("street and city are text")
        return self


class Text(BaseModel):
    text: str


class Contact(BaseModel):
    name: str | None
    reached_by: str


async def _simple_text(args: NoArguments, ctx: ToolContext) -> Any:
    return await request_json(ctx, "GET", "/simple-text")


async def _error(args: NoArguments, ctx: ToolContext) -> Any:
    return await request_json(ctx, "POST", "/refuse")


async def _mirror(args: HeaderArgs, ctx: ToolContext) -> Any:
    return {"text": args.value}


async def _contact(args: ContactArgs, ctx: ToolContext) -> Any:
    return {"name": args.name, "reached_by": args.contactMethod or ("phone" if args.phone else "email")}


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="test_simple_text",
        adapter="test",
        description="Answers a fixed sentence from the fixture backend.",
        mode=Mode.READ,
        arguments=NoArguments,
        output=Text,
        access=Access.public(),
        execute=_simple_text,
        open_world=False,
    ),
    Tool(
        name="test_error_handling",
        adapter="test",
        description="Always fails: the fixture backend refuses the call.",
        mode=Mode.READ,
        arguments=NoArguments,
        output=Text,
        access=Access.public(),
        execute=_error,
        open_world=False,
    ),
    Tool(
        name="test_mirror_header",
        adapter="test",
        description="Answers its argument, which clients also send as the Mcp-Param-Value header.",
        mode=Mode.READ,
        arguments=HeaderArgs,
        output=Text,
        access=Access.public(),
        execute=_mirror,
        open_world=False,
    ),
    Tool(
        name="json_schema_2020_12_tool",
        adapter="json",
        description="Takes contact details described with JSON Schema 2020-12 keywords.",
        mode=Mode.READ,
        arguments=ContactArgs,
        output=Contact,
        access=Access.public(),
        execute=_contact,
        open_world=False,
    ),
)


def create_fixture_backend() -> Starlette:
    """The backend of the ``test`` adapter: a fixed answer, a refusal and a health check."""

    async def simple_text(request: Request) -> JSONResponse:
        return JSONResponse({"text": SIMPLE_TEXT})

    async def refuse(request: Request) -> JSONResponse:
        return JSONResponse({"code": "intentional", "message": "This tool intentionally fails"}, status_code=422)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/simple-text", simple_text),
            Route("/refuse", refuse, methods=["POST"]),
            Route("/_health", health),
        ]
    )
