"""``countersign agent ask`` and ``countersign agent eval`` through the real command line, against
the session gateway, with scripted transcripts (no model API key needed)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from backends.serve import serve_app
from gateway.cli.main import main
from gateway.principal import KeyKind
from tests.support.agents import make_key

pytestmark = pytest.mark.anyio

TRANSCRIPTS = Path(__file__).resolve().parent.parent / "data" / "agent"


async def test_ask_prints_the_answer_the_waiting_card_and_its_real_outcome(
    redis: Redis, mcp_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No admin decides within the follow window: the card is reported as still waiting, never as done."""
    agent = await make_key(redis, roles=("staff",))
    script = tmp_path / "book.json"
    book = {"room_id": "room-cirrus", "date": "2028-07-03", "start": "11:00", "end": "12:00", "title": "Retro"}
    turns = [
        "Sure, booking it now!",
        {"tool_calls": [{"name": "rooms_book", "arguments": book}]},
        {"final": "It waits for approval."},
    ]
    script.write_text(json.dumps(turns))  # fmt: skip
    argv = ["agent", "ask", "Book room-cirrus", "--url", mcp_url, "--scripted", str(script), "--follow-seconds", "0.5"]
    status = await anyio.to_thread.run_sync(main, argv, {"COUNTERSIGN_AGENT_KEY": agent})
    out = capsys.readouterr()
    assert status == 0
    lines = out.out.splitlines()
    assert lines[0] == "agent: It waits for approval."
    assert "is waiting for an administrator; nothing has been written yet." in lines[1]
    assert "still waiting" in lines[2] and "nothing is known to be written" in lines[2]
    assert "usage: model calls: 3" in out.err
    assert "a turn did not parse (not a single JSON object); it began 'Sure, booking it now!'" in out.err


async def test_eval_prints_a_score_table_and_exits_0_when_every_check_passes(
    redis: Redis, mcp_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = await make_key(redis, subject="demo@acme.example", roles=("staff", "support"))
    admin = await make_key(redis, subject="root@acme.example", kind=KeyKind.ADMIN, roles=("approver",))
    argv = ["agent", "eval", "--url", mcp_url, "--scripted", str(TRANSCRIPTS), "--only", "book-rejected",
            "--only", "hostile-order-note", "--follow-seconds", "20"]  # fmt: skip
    environ = {"COUNTERSIGN_AGENT_KEY": agent, "COUNTERSIGN_ADMIN_KEY": admin}
    status = await anyio.to_thread.run_sync(main, argv, environ)
    out = capsys.readouterr().out.splitlines()
    assert status == 0, out
    assert out[0].split() == ["scenario", "right_tool", "asked_before_write", "no_premature_success",
                              "ignored_injection", "within_max_turns", "reported_outcome", "score"]  # fmt: skip
    assert [line.split()[0] for line in out[1:]] == ["book-rejected", "hostile-order-note", "total"]
    assert out[-1].split()[-1] == "9/9"  # 5 checks apply to the booking, 4 to the read


def test_eval_without_a_model_or_a_transcript_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["agent", "eval", "--url", "http://127.0.0.1:9/mcp"], {"COUNTERSIGN_AGENT_KEY": "k",
                                                                         "COUNTERSIGN_ADMIN_KEY": "a"})  # fmt: skip
    assert status == 2 and "--model is required" in capsys.readouterr().err


def test_a_model_without_its_api_key_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["agent", "ask", "hi", "--model", "gpt-test", "--provider", "anthropic"]
    assert main(argv, {"COUNTERSIGN_AGENT_KEY": "k"}) == 2
    assert "set ANTHROPIC_API_KEY" in capsys.readouterr().err


def test_agent_help_lists_ask_and_eval(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["agent", "--help"], {})
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "ask" in text and "eval" in text


async def test_a_key_the_gateway_refuses_is_one_line_and_exit_status_1(
    mcp_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["agent", "ask", "hi", "--url", mcp_url, "--scripted", str(TRANSCRIPTS / "availability-read.json")]
    status = await anyio.to_thread.run_sync(main, argv, {"COUNTERSIGN_AGENT_KEY": "csk_agent_not_a_key"})
    err = capsys.readouterr().err
    assert (
        status == 1 and err.startswith("countersign agent: cannot open an MCP session") and len(err.splitlines()) == 1
    )


async def test_ask_with_a_model_api_sends_each_turn_to_it_and_sums_its_usage(
    redis: Redis, mcp_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--model with --base-url: every turn goes over HTTP to an OpenAI-compatible server (here a local
    Starlette app answering by what the prompt shows), with the key from the environment."""
    seen: list[str] = []

    async def completions(request: Request) -> Response:
        body = await request.json()
        prompt = body["messages"][0]["content"]
        seen.append(request.headers["authorization"])
        read = {"tool_calls": [{"name": "rooms_list", "arguments": {}}]}
        turn = read if "(none yet)" in prompt else {"final": "There are five rooms."}
        usage = {"prompt_tokens": 100, "completion_tokens": 5}
        answer = {"choices": [{"message": {"content": json.dumps(turn)}}], "usage": usage}
        return JSONResponse(answer)

    agent = await make_key(redis, roles=("staff",))
    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    async with serve_app(app) as base:
        argv = ["agent", "ask", "How many rooms are there?", "--url", mcp_url, "--model", "local-model",
                "--base-url", f"{base}/v1"]  # fmt: skip
        environ = {"COUNTERSIGN_AGENT_KEY": agent, "OPENAI_API_KEY": "sk-local"}
        status = await anyio.to_thread.run_sync(main, argv, environ)
    out = capsys.readouterr()
    assert status == 0 and out.out.splitlines() == ["agent: There are five rooms."]
    assert seen == ["Bearer sk-local", "Bearer sk-local"]
    assert "usage: model calls: 2 (0 failed) by local-model (agent.turn)" in out.err
    assert "usage: tokens: 200 in, 10 out" in out.err
