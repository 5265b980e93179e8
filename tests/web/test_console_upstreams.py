"""The console's review of fronted MCP servers, in Chromium: the real everything server is upgraded under a
gateway, and the registry admin sees the changed tool quarantined with its diff and the server's hints as
suggestions only, then classifies it from the page and agents are served it again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from redis.asyncio import Redis
from starlette.datastructures import Secret

from backends.serve import serve_app_in_thread
from gateway.config.settings import OrgSettings, Settings
from gateway.config.upstreams import UpstreamSection
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.upstream_reviews import UpstreamReviewStore
from tests.support.agents import agent, make_key
from tests.support.browser import browser, screenshot, shots
from tests.support.mcp_servers import (
    EVERYTHING_EARLIER_VERSION,
    EVERYTHING_VERSION,
    NodeServer,
    fronting_settings,
    install_everything_servers,
    installed_or_skipped,
    serving_over_http,
)
from tests.support.notes_server import ADD, LIST, NotesBoard
from tests.support.redis_server import free_port
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", name="redis_url")
def own_database(quiet_redis_url: str) -> str:
    return quiet_redis_url


@pytest.fixture(scope="module")
def servers() -> dict[str, NodeServer]:
    return installed_or_skipped("the everything MCP server", install_everything_servers)


async def _api(base: str, key: str, method: str, path: str, body: Any = None) -> Any:
    async with httpx.AsyncClient(base_url=f"{base}/admin/api", timeout=10) as http:
        answer = await http.request(method, path, json=body, headers={"authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    return answer.json()


async def _echo(base: str, admin: str, *, state: str) -> dict[str, Any]:
    """echo as the review shows it, once it is in `state`."""
    with anyio.fail_after(30):
        while True:
            tools = {tool["name"]: tool for tool in (await _api(base, admin, "GET", "/upstreams/every"))["tools"]}
            if tools.get("echo", {}).get("state") == state:
                return tools["echo"]
            await anyio.sleep(0.1)


async def _served(base: str, token: str) -> set[str]:
    async with agent(f"{base}/mcp", token) as client:
        return {tool.name for tool in (await client.list_tools()).tools if tool.name.startswith("every_")}


async def test_in_a_browser_a_changed_upstream_tool_shows_its_diff_and_is_served_again_once_classified(
    servers: dict[str, NodeServer], redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """echo, accepted as the earlier version listed it, changes with the upgrade: the page shows it quarantined
    (changed) with the diff, its annotations as the server's suggestion, and no class chosen for the admin;
    a dismissed confirmation sends nothing; confirmed, the review is stored and agents get echo back."""
    port = free_port()
    section = UpstreamSection(transport="http", url=f"http://127.0.0.1:{port}/mcp", protocol="legacy")
    # demo: the console takes a pasted admin key (no identity provider here)
    settings = fronting_settings(redis_url, "every", section, registry_poll_seconds=0.2, demo=True)
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    staff = await make_key(redis, roles=("staff",))
    async with serving_over_http(servers[EVERYTHING_EARLIER_VERSION], port, tmp_path / "earlier.log"):
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:
            echo = await _echo(base, admin, state="quarantined")
            review = {"mode": "read", "definition": echo["listed_hash"], "roles": ["staff"]}
            await _api(base, admin, "PUT", "/upstreams/every/tools/echo", review)
            await _echo(base, admin, state="served")
    async with serving_over_http(servers[EVERYTHING_VERSION], port, tmp_path / "later.log"):
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:
            changed = await _echo(base, admin, state="quarantined")
            assert changed["reason"] == "changed"
            assert await _served(base, staff) == set()
            async with browser(tmp_path / "profile") as page:
                await page.send("Page.navigate", {"url": f"{base}/admin/#key={admin}&next=/upstreams"})
                tool = 'document.querySelector(\'[data-upstream="every"] [data-tool="echo"]\')'
                await page.until(f"{tool} !== null")
                seen = json.loads(await page.evaluate(
                    f"""JSON.stringify({{
                        state: {tool}.dataset.state,
                        badge: {tool}.querySelector('h4 .state').textContent,
                        added: [...{tool}.querySelectorAll('pre.unified .add')].map((line) => line.textContent),
                        removed: [...{tool}.querySelectorAll('pre.unified .del')].map((line) => line.textContent),
                        hints: [...{tool}.querySelectorAll('ul.suggestion li')].map((li) => li.textContent),
                        chosen: {tool}.querySelector('select[name="mode"]').value,
                        listed: {tool}.querySelector('form.review p code').textContent,
                        images: document.images.length,
                    }})"""
                ))  # fmt: skip
                await screenshot(page, shots(tmp_path) / "upstream-review.png", full_page=True)
                assert (seen["state"], seen["badge"]) == ("quarantined", "quarantined: changed")
                assert '-  "description": "Echoes back the input",' in seen["removed"]
                assert '+  "description": "Echoes back the input string",' in seen["added"]
                assert seen["chosen"] == "" and seen["listed"] == changed["listed_hash"]
                assert seen["images"] == 0
                fill = (
                    f"{tool}.querySelector('select[name=\"mode\"]').value = 'read';"
                    f"{tool}.querySelector('input[name=\"roles\"]').value = 'staff';"
                    f"{tool}.querySelector('[data-review=\"echo\"]').click()"
                )
                await page.evaluate(fill)
                with anyio.fail_after(5):
                    while not page.dialogs:
                        await page.evaluate("0")
                assert page.dialogs == ["Classify echo of every as read? Agents will be served it as such."]
                shown = await _api(base, admin, "GET", "/upstreams/every")
                assert next(t for t in shown["tools"] if t["name"] == "echo")["state"] == "quarantined"  # dismissed
                await page.evaluate("window.confirm = () => true;" + fill)
                said = await page.until("document.querySelector('.notice.ok')?.textContent")
                assert said == f"Reviewed echo of every as read at {changed['listed_hash']}."
            served = await _echo(base, admin, state="served")
            assert served["reviewed_by"] == "root@acme.example" and served["review"]["roles"] == ["staff"]
            with anyio.fail_after(20):
                while await _served(base, staff) != {"every_echo"}:
                    await anyio.sleep(0.1)


async def test_in_a_browser_a_server_registered_again_elsewhere_is_fronted_once_each_change_is_acknowledged(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """gitsvc's service registered it again at another URL: the page shows the new server and what it changes;
    accepted with the change unacknowledged it is refused and nothing moves; with the box checked, the new server
    is the one fronted."""
    settings = Settings(
        redis_url=redis_url,
        adapters={},
        orgs=(OrgSettings(name="acme", adapters=frozenset({"gitsvc"}), roles=frozenset({"staff"})),),
        audit_secret=Secret(TEST_AUDIT_SECRET),
        registry_poll_seconds=0.2,
        demo=True,
    )
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    store = UpstreamReviewStore(redis)
    before, after = f"http://127.0.0.1:{free_port()}/mcp", f"http://127.0.0.1:{free_port()}/mcp"
    await store.register("gitsvc", {"transport": "http", "url": before}, owner="git-team")
    await store.register("gitsvc", {"transport": "http", "url": after}, owner="git-team", hold=True)
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        async with browser(tmp_path / "profile") as page:
            await page.send("Page.navigate", {"url": f"{base}/admin/#key={admin}&next=/upstreams"})
            form = "document.querySelector('[data-registration=\"gitsvc\"]')"
            await page.until(f"{form} !== null")
            shown = await page.evaluate(f"{form}.querySelector('dl.fields dd code').textContent")
            assert shown == after
            await screenshot(page, shots(tmp_path) / "upstream-registration.png", full_page=True)
            submit = f"window.confirm = () => true; {form}.querySelector('[data-accept-registration]').click()"
            await page.evaluate(submit)
            refused = await page.until("document.querySelector('.notice.error')?.textContent")
            assert "acknowledge" in refused.lower()
            assert (await store.registered())["gitsvc"]["url"] == before
            await page.evaluate(f"{form}.querySelector('input[value=\"url\"]').checked = true; {submit}")
            said = await page.until("document.querySelector('.notice.ok')?.textContent")
            assert said == f"gitsvc is fronted at {after}."
    assert (await store.registered())["gitsvc"]["url"] == after


async def test_in_a_browser_an_instruction_in_a_fronted_tools_description_is_flagged_before_it_is_classified(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The board lists ``add_note`` with an instruction to the model in its description: its review on the page
    shows the flag, where it is and its excerpt (as text), above the classification form; the board's plain read
    shows none."""
    board = NotesBoard()
    board.redefine("instruction")
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    with serve_app_in_thread(board.app(), lifespan=True) as board_url:
        section = UpstreamSection(transport="http", url=f"{board_url}/mcp")
        settings = fronting_settings(redis_url, "notes", section, registry_poll_seconds=0.2, demo=True)
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:
            async with browser(tmp_path / "profile") as page:
                await page.send("Page.navigate", {"url": f"{base}/admin/#key={admin}&next=/upstreams"})
                tool = 'document.querySelector(\'[data-upstream="notes"] [data-tool="{name}"]\')'
                await page.until(f"{tool.format(name=ADD)} !== null && {tool.format(name=LIST)} !== null")
                seen = json.loads(await page.evaluate(
                    f"""JSON.stringify({{
                        flags: [...{tool.format(name=ADD)}.querySelectorAll('.flags li')].map((li) => [
                            li.dataset.flag, li.querySelector('code').textContent,
                            li.querySelector('pre.excerpt').textContent]),
                        heading: {tool.format(name=ADD)}.querySelector('.flags h5').textContent,
                        plain: {tool.format(name=LIST)}.querySelectorAll('.flags').length,
                    }})"""
                ))  # fmt: skip
                await screenshot(page, shots(tmp_path) / "upstream-flags.png", full_page=True)
    [(code, field, excerpt)] = seen["flags"]
    assert (code, field) == ("instruction_to_model", "definition.description")
    assert "Ignore previous instructions" in excerpt
    assert seen["heading"] == "⚠ 1 safety flag: read before classifying" and seen["plain"] == 0
