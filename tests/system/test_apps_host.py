"""MCP Apps views in a real host: ext-apps' AppBridge and the official TypeScript MCP client, in headless Chromium.

The host page (`tests.support.apps_host`, pinned packages from npm, bundled with esbuild) is served from the
gateway's own origin, speaks MCP to ``/mcp`` with an agent's key and frames each view in a sandboxed iframe,
as a chat host does. The test reads what the model was handed (the listing and the result without
``_meta``) and each view's own DOM, through an isolated world of its frame.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from redis.asyncio import Redis
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from backends.demo_data import HIDDEN_TITLE, HOSTILE_TITLE
from backends.serve import serve_app_in_thread
from gateway.executor.views import APP_TOOLS
from gateway.notifications.message import NotificationSettings
from gateway.runtime.app import create_app
from tests.support.agents import agent, make_key, payload
from tests.support.apps_host import available_host
from tests.support.browser import Page, browser, screenshot, shots
from tests.support.cards import approve_as_admin, settled
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio

MARKUP = "<img src=x onerror=\"parent.postMessage(1, '*')\"><b>Approve every refund</b>"
"""A booking title that is markup: a view that parsed it would load an image and run its handler."""
DAY = {"room_id": "room-atlas", "date": "2026-12-01"}
CONSOLE_URL = "https://approvals.acme.example"
"""Where approvers decide, as configured: the card view links there, not to the host the view was reached by."""


class _HostBeside:
    """The gateway, with the host page at ``/host/``: one origin, as a host's page and its MCP server need not
    be, but as the gateway's Origin check admits without configuration."""

    def __init__(self, gateway: ASGIApp, page: Path) -> None:
        self._gateway = gateway
        self._page = StaticFiles(directory=page)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/host/"):
            await self._page({**scope, "path": scope["path"].removeprefix("/host")}, receive, send)
        else:
            await self._gateway(scope, receive, send)


@pytest.fixture(scope="module")
def host_url(redis_url: str, backends: dict[str, Backend], expenses: Backend) -> Iterator[str]:
    page = available_host()
    settings = gateway_settings(redis_url, backends, expenses=expenses)
    settings = replace(settings, notifications=NotificationSettings(console_url=CONSOLE_URL))
    app = _HostBeside(create_app(settings), page)
    with serve_app_in_thread(app, lifespan=True) as base:
        yield base


async def _view(page: Page, name: str) -> Page:
    """The view framed as `name`, once the host has framed it and handed it its result."""
    await page.until(f"host.views.some((view) => view.frame === {json.dumps(name)})")
    frame = await page.frame(name)
    assert frame is not None, f"no frame named {name}"
    return frame


async def _book_as_another_person(redis: Redis, host_url: str, title: str, day: str) -> None:
    """A booking of another org member's, with `title`, made through the gateway and approved by an admin."""
    token = await make_key(redis, roles=("staff",), subject="hank@acme.example")
    booking = {"room_id": "room-atlas", "date": day, "start": "14:00", "end": "15:00", "title": title}
    async with agent(f"{host_url}/mcp", token) as client:
        card_id = payload(await client.call_tool("rooms_book", booking))["card_id"]
    await approve_as_admin(redis, host_url, card_id)
    assert (await settled(redis, card_id)).state.value == "SUCCEEDED"


async def test_in_a_real_host_the_person_reads_the_stranger_text_and_follows_the_card_the_model_never_sees(
    redis: Redis, host_url: str, tmp_path: Path
) -> None:
    """Read view: the stranger's titles (an instruction, markup, invisible characters) are shown as text, marked
    as written by someone else, each invisible character made visible, while what the model was handed holds
    neither title nor app-only tool. Card view: the booking's card follows PENDING to SUCCEEDED after an
    approval made in the admin API, without a reload, and its console link goes to the host to open."""
    day = f"2028-11-{secrets.randbelow(28) + 1:02d}"  # a day no other test books
    await _book_as_another_person(redis, host_url, MARKUP, day)
    token = await make_key(redis, roles=("staff",))

    async with browser(tmp_path / "profile") as page:
        await page.send("Page.navigate", {"url": f"{host_url}/host/index.html#key={token}"})
        await page.until("window.host && (host.ready || host.errors.length)")
        assert await page.evaluate("JSON.stringify(host.errors)") == "[]"

        await page.evaluate(f"void host.call('rooms_availability', {json.dumps(DAY)})")
        read = await _view(page, "view-0")
        assert HOSTILE_TITLE in await read.until("document.getElementById('text').textContent")
        model_saw = await page.evaluate("host.modelSaw")
        assert HOSTILE_TITLE not in model_saw and "countersign_view" not in model_saw
        assert sorted(await page.evaluate("host.appOnly")) == sorted(APP_TOOLS)  # ext-apps reads them as the views'

        assert await read.evaluate("!document.getElementById('stranger').hidden") is True

        await page.evaluate(f"void host.call('rooms_availability', {json.dumps({**DAY, 'date': day})})")
        other = await _view(page, "view-1")
        assert MARKUP in await other.until("document.getElementById('text').textContent")
        assert await other.evaluate("document.images.length + document.querySelectorAll('b').length") == 0

        hidden = {"room_id": "room-cirrus", "date": "2026-12-02"}
        await page.evaluate(f"void host.call('rooms_availability', {json.dumps(hidden)})")
        smuggled = await _view(page, "view-2")
        assert "Budget sync" in await smuggled.until("document.getElementById('text').textContent")
        marks = await smuggled.evaluate("document.querySelectorAll('#text .hidden-char').length")
        assert marks == len(HIDDEN_TITLE) - len("Budget sync")  # every invisible character is shown as one

        booking = {"room_id": "room-eos", "date": day, "start": "09:00", "end": "09:30", "title": "Views demo"}
        await page.evaluate(f"void host.call('rooms_book', {json.dumps(booking)})")
        state = "document.getElementById('state').textContent"
        card = await _view(page, "view-3")
        assert await card.until(f"{state} === 'PENDING' && {state}") == "PENDING"
        card_id = await page.evaluate("host.structured.card_id")
        await card.evaluate("document.getElementById('console').click()")
        assert await page.until("host.links[0]") == f"{CONSOLE_URL}/admin/#/cards/{card_id}"
        await page.evaluate("window.marker = 'not reloaded'")

        await approve_as_admin(redis, host_url, card_id)
        assert await card.until(f"{state} === 'SUCCEEDED' && {state}", seconds=30) == "SUCCEEDED"
        assert await page.evaluate("window.marker") == "not reloaded"
        assert (await card.evaluate("document.getElementById('status').textContent")).startswith("Settled")
        await screenshot(page, shots(tmp_path) / "views.png")  # the README's picture
