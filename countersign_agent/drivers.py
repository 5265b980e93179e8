"""The model as a pure function: ``await driver.call(purpose, prompt) -> str``.

A driver holds no conversation: every call sends one prompt as one user message and returns the
text of the answer, so the loop rebuilds the whole prompt each turn and owns all state. Each call
is recorded in the `UsageLedger` (model, purpose, tokens, latency, success) and nothing of the
prompt or the answer is kept.

Two wire formats over HTTP (httpx2, the client the MCP SDK already brings, so no second HTTP
library is installed):

* `OpenAIChat`: ``POST {base_url}/chat/completions``, the OpenAI-compatible chat API that OpenAI,
  vLLM, Ollama, LiteLLM and most gateways speak (bearer key);
* `AnthropicMessages`: ``POST {base_url}/v1/messages``, the Anthropic messages API (``x-api-key``).

Raises `DriverError` for a transport failure, a non-2xx status, or an answer without text; the
error says which provider and status, never the prompt.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx2

from countersign_agent.errors import DriverError
from countersign_agent.usage import Usage, UsageLedger

__all__ = ["PROVIDERS", "AnthropicMessages", "Driver", "OpenAIChat", "make_driver"]

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_BASE_URLS: Mapping[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
PROVIDERS = tuple(DEFAULT_BASE_URLS)


class Driver(Protocol):
    """What the loop needs of a model: one prompt in, one text out, per purpose."""

    model: str

    async def call(self, purpose: str, prompt: str) -> str:
        """The model's answer to `prompt`. `purpose` names the loop's step, for the usage ledger.

        Raises:
            DriverError: the model could not be asked, or gave no text.
        """
        ...


@dataclass(kw_only=True)
class OpenAIChat:
    """An OpenAI-compatible chat completions endpoint."""

    model: str
    api_key: str = field(repr=False)
    http: httpx2.AsyncClient = field(repr=False)
    ledger: UsageLedger
    base_url: str = DEFAULT_BASE_URLS["openai"]
    temperature: float | None = 0.0
    """Left out of the request when None (some reasoning models accept no temperature)."""

    async def call(self, purpose: str, prompt: str) -> str:
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": prompt}]}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        headers = {"authorization": f"Bearer {self.api_key}"}
        url = f"{self.base_url.rstrip('/')}/chat/completions"
        return await _exchange(
            "openai", self.model, purpose, self.ledger, lambda: _post(self.http, url, headers, body), _openai_text
        )


def _openai_text(answer: Mapping[str, Any]) -> tuple[str, int, int]:
    choices = answer.get("choices")
    message = (
        choices[0].get("message") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    )
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str):
        raise DriverError("the answer has no choices[0].message.content", provider="openai")
    usage = _mapping(answer.get("usage"))
    return text, _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")


@dataclass(kw_only=True)
class AnthropicMessages:
    """The Anthropic messages API."""

    model: str
    api_key: str = field(repr=False)
    http: httpx2.AsyncClient = field(repr=False)
    ledger: UsageLedger
    base_url: str = DEFAULT_BASE_URLS["anthropic"]
    max_tokens: int = 2048
    """Required by the API: the most the answer may hold."""

    async def call(self, purpose: str, prompt: str) -> str:
        body = {"model": self.model, "max_tokens": self.max_tokens, "messages": [{"role": "user", "content": prompt}]}
        headers = {"x-api-key": self.api_key, "anthropic-version": ANTHROPIC_VERSION}
        url = f"{self.base_url.rstrip('/')}/v1/messages"
        return await _exchange(
            "anthropic", self.model, purpose, self.ledger, lambda: _post(self.http, url, headers, body), _anthropic_text
        )


def _anthropic_text(answer: Mapping[str, Any]) -> tuple[str, int, int]:
    blocks = answer.get("content")
    texts = (
        [
            b["text"]
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        if isinstance(blocks, list)
        else []
    )
    if not texts:
        raise DriverError("the answer has no text content block", provider="anthropic")
    usage = _mapping(answer.get("usage"))
    return "".join(texts), _count(usage, "input_tokens"), _count(usage, "output_tokens")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value >= 0 else 0


async def _post(http: httpx2.AsyncClient, url: str, headers: Mapping[str, str], body: Any) -> httpx2.Response:
    return await http.post(url, headers=dict(headers), json=body)


async def _exchange(
    provider: str,
    model: str,
    purpose: str,
    ledger: UsageLedger,
    send: Callable[[], Awaitable[httpx2.Response]],
    read: Callable[[Mapping[str, Any]], tuple[str, int, int]],
) -> str:
    """Send, read the text and the token counts, and record the call whatever came of it."""
    started = time.perf_counter()
    tokens = (0, 0)
    try:
        try:
            response = await send()
        except httpx2.HTTPError as error:
            raise DriverError(f"{provider}: {type(error).__name__}", provider=provider) from error
        if not response.is_success:
            raise DriverError(
                f"{provider}: HTTP {response.status_code}", provider=provider, status=response.status_code
            )
        try:
            answer = response.json()
        except ValueError as error:
            raise DriverError(f"{provider}: the answer is not JSON", provider=provider) from error
        if not isinstance(answer, dict):
            raise DriverError(f"{provider}: the answer is not a JSON object", provider=provider)
        text, *counted = read(answer)
        tokens = (counted[0], counted[1])
    except DriverError:
        _record(ledger, model, purpose, started, tokens, ok=False)
        raise
    _record(ledger, model, purpose, started, tokens, ok=True)
    return text


def _record(
    ledger: UsageLedger, model: str, purpose: str, started: float, tokens: tuple[int, int], *, ok: bool
) -> None:
    latency = (time.perf_counter() - started) * 1000
    ledger.record(
        Usage(model=model, purpose=purpose, input_tokens=tokens[0], output_tokens=tokens[1], latency_ms=latency, ok=ok)
    )


def make_driver(
    provider: str, *, model: str, api_key: str, http: httpx2.AsyncClient, ledger: UsageLedger, base_url: str | None
) -> Driver:
    """The driver for `provider` (one of `PROVIDERS`); `base_url` None means the provider's own API."""
    if provider == "openai":
        return OpenAIChat(
            model=model, api_key=api_key, http=http, ledger=ledger, base_url=base_url or DEFAULT_BASE_URLS["openai"]
        )
    if provider == "anthropic":
        return AnthropicMessages(
            model=model, api_key=api_key, http=http, ledger=ledger, base_url=base_url or DEFAULT_BASE_URLS["anthropic"]
        )
    raise ValueError(f"unknown provider {provider!r}; one of {', '.join(PROVIDERS)}")
