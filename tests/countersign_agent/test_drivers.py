"""The drivers against small local Starlette apps that speak the OpenAI-compatible chat API and the
Anthropic messages API, over real HTTP under uvicorn: what they send, what they return, what the
usage ledger keeps (tokens and latency, never text), and each failure as a `DriverError`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from backends.serve import serve_app
from countersign_agent.drivers import AnthropicMessages, OpenAIChat, make_driver
from countersign_agent.errors import DriverError
from countersign_agent.usage import UsageLedger

pytestmark = pytest.mark.anyio

PROMPT = "SECRET-PROMPT-TEXT: list the rooms"
ANSWER = '{"final": "SECRET-ANSWER-TEXT"}'


class ModelApi:
    """A model API that records each request and answers with `reply` (or `status`)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.status = 200
        self.reply: Any = None

    async def openai(self, request: Request) -> Response:
        self.requests.append((request.url.path, dict(request.headers), await request.json()))
        body = self.reply if self.reply is not None else {
            "choices": [{"message": {"role": "assistant", "content": ANSWER}}],
            "usage": {"prompt_tokens": 31, "completion_tokens": 7},
        }  # fmt: skip
        return JSONResponse(body, status_code=self.status)

    async def anthropic(self, request: Request) -> Response:
        self.requests.append((request.url.path, dict(request.headers), await request.json()))
        body = self.reply if self.reply is not None else {
            "content": [{"type": "text", "text": ANSWER[:10]}, {"type": "text", "text": ANSWER[10:]}],
            "usage": {"input_tokens": 40, "output_tokens": 9},
        }  # fmt: skip
        return JSONResponse(body, status_code=self.status)


@pytest.fixture
async def api() -> AsyncIterator[tuple[ModelApi, str, httpx2.AsyncClient]]:
    model = ModelApi()
    app = Starlette(routes=[Route("/v1/chat/completions", model.openai, methods=["POST"]),
                            Route("/v1/messages", model.anthropic, methods=["POST"])])  # fmt: skip
    async with serve_app(app) as base, httpx2.AsyncClient(timeout=5) as http:
        yield model, base, http


async def test_openai_chat_sends_one_user_message_with_the_bearer_key_and_returns_the_text(
    api: tuple[ModelApi, str, httpx2.AsyncClient],
) -> None:
    model, base, http = api
    ledger = UsageLedger()
    driver = OpenAIChat(model="gpt-test", api_key="sk-test", http=http, ledger=ledger, base_url=f"{base}/v1")
    assert await driver.call("agent.turn", PROMPT) == ANSWER
    [(path, headers, body)] = model.requests
    assert path == "/v1/chat/completions" and headers["authorization"] == "Bearer sk-test"
    assert body == {"model": "gpt-test", "messages": [{"role": "user", "content": PROMPT}], "temperature": 0.0}
    [usage] = ledger.entries
    assert (usage.model, usage.purpose, usage.input_tokens, usage.output_tokens, usage.ok) == (
        "gpt-test", "agent.turn", 31, 7, True)  # fmt: skip
    assert usage.latency_ms > 0
    assert "SECRET" not in repr(ledger) and "sk-test" not in repr(driver)


async def test_anthropic_messages_sends_the_api_key_and_version_and_joins_the_text_blocks(
    api: tuple[ModelApi, str, httpx2.AsyncClient],
) -> None:
    model, base, http = api
    ledger = UsageLedger()
    driver = make_driver("anthropic", model="claude-test", api_key="ak-test", http=http, ledger=ledger, base_url=base)
    assert isinstance(driver, AnthropicMessages)
    assert await driver.call("agent.turn", PROMPT) == ANSWER
    [(path, headers, body)] = model.requests
    assert path == "/v1/messages" and headers["x-api-key"] == "ak-test" and headers["anthropic-version"] == "2023-06-01"
    assert body["messages"] == [{"role": "user", "content": PROMPT}] and body["max_tokens"] > 0
    assert (ledger.input_tokens, ledger.output_tokens, ledger.calls) == (40, 9, 1)
    assert "SECRET" not in repr(ledger.entries)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("status", "reply"),
    [(429, {"error": {"message": "rate limited"}}), (200, {"choices": []}), (200, {"content": [{"type": "image"}]}),
     (200, ["not", "an", "object"])],
    ids=["refused", "no-choices", "no-text-block", "not-an-object"],
)  # fmt: skip
async def test_a_failed_or_textless_answer_is_a_driver_error_and_is_recorded_as_failed(
    api: tuple[ModelApi, str, httpx2.AsyncClient], provider: str, status: int, reply: Any
) -> None:
    model, base, http = api
    model.status, model.reply = status, reply
    ledger = UsageLedger()
    base_url = f"{base}/v1" if provider == "openai" else base
    driver = make_driver(provider, model="m", api_key="k", http=http, ledger=ledger, base_url=base_url)
    with pytest.raises(DriverError) as raised:
        await driver.call("agent.turn", PROMPT)
    assert raised.value.provider == provider and raised.value.status == (status if status != 200 else None)
    assert PROMPT not in str(raised.value)
    [usage] = ledger.entries
    assert usage.ok is False and (usage.input_tokens, usage.output_tokens) == (0, 0)


async def test_an_unreachable_api_is_a_driver_error() -> None:
    """Nothing listens on the port: the transport error becomes a DriverError naming the provider."""
    ledger = UsageLedger()
    async with httpx2.AsyncClient(timeout=2) as http:
        driver = make_driver("openai", model="m", api_key="k", http=http, ledger=ledger, base_url="http://127.0.0.1:9")
        with pytest.raises(DriverError) as raised:
            await driver.call("agent.turn", PROMPT)
    assert raised.value.provider == "openai" and ledger.entries[0].ok is False


def test_an_unknown_provider_is_refused() -> None:
    with pytest.raises(ValueError):
        make_driver("cohere", model="m", api_key="k", http=httpx2.AsyncClient(), ledger=UsageLedger(), base_url=None)
