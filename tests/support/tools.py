"""Small tool declarations for tests that need exactly one or two tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from gateway.tools.context import ToolContext
from gateway.tools.declarations import Access, Approval, Mode, Tool, WriteContract, WriteStatus
from gateway.untrusted import ShownUntrusted, Untrusted


class EchoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str
    times: int = 1


class EchoOut(BaseModel):
    echoed: str


class NoteOut(BaseModel):
    author: Untrusted
    body: Untrusted
    length: int


class LetterOut(BaseModel):
    author: Untrusted
    body: ShownUntrusted
    length: int


async def echo(args: EchoArgs, ctx: ToolContext) -> dict[str, Any]:
    return {"echoed": args.text * args.times}


async def note(args: EchoArgs, ctx: ToolContext) -> dict[str, Any]:
    return {"author": "mallory", "body": args.text, "length": len(args.text)}


async def unknown_status(key: str, ctx: ToolContext) -> WriteStatus:
    return WriteStatus(state="unknown")


CONTRACT = WriteContract(
    dedupes_on_key=True, key_retention_seconds=3600, status_lookup=unknown_status, reference_field="echoed"
)


def read_tool(name: str = "demo_echo", access: Access | None = None, **overrides: Any) -> Tool:
    fields: dict[str, Any] = {
        "name": name,
        "adapter": "demo",
        "description": "Echo text.",
        "mode": Mode.READ,
        "arguments": EchoArgs,
        "output": EchoOut,
        "access": access or Access.public(),
        "execute": echo,
    }
    fields.update(overrides)
    return Tool(**fields)


def note_tool(name: str = "demo_note", output: type[BaseModel] = NoteOut) -> Tool:
    """A read whose answer holds a third party's words (`NoteOut`: withheld; `LetterOut`: shown, fenced)."""
    return read_tool(
        name,
        output=output,
        execute=note,
        emits_untrusted_text=True,
        model_view=lambda out: out.model_dump(),
        model_view_output=output,
        human_view=lambda out: f"{out.author}: {out.body}",
    )


def letter_tool() -> Tool:
    """A read that shows the model a third party's words (its body, fenced): it taints its reader."""
    return note_tool("demo_letter", LetterOut)


def write_tool(name: str = "demo_write", **overrides: Any) -> Tool:
    fields: dict[str, Any] = {
        "mode": Mode.WRITE,
        "write_contract": CONTRACT,
        "access": Access.roles("staff"),
        "approval": Approval(),
        "summary": lambda args: f"Echo {len(args.text)} characters {args.times} time(s)",
        "agent_text_fields": frozenset({"text"}),
    }
    fields.update(overrides)
    return read_tool(name, **fields)
