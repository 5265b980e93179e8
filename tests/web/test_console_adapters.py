"""The console's review of registered adapters, in Chromium: every proposed tool as a reviewer reads it, and an
update that moves the base URL called out first, diffed in words, and accepted only once acknowledged."""

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
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.registrations import RegistryStore
from tests.support.agents import make_key
from tests.support.browser import browser, screenshot, shots
from tests.support.registration import issues_manifest
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

CARD = "document.querySelector('[data-adapter=\"notes\"]')"


@pytest.fixture(scope="module", name="redis_url")
def own_database(quiet_redis_url: str) -> str:
    return quiet_redis_url


async def _put(base: str, key: str, manifest: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        answer = await http.put(
            "/registry/api/adapters/notes", json=manifest, headers={"authorization": f"Bearer {key}"}
        )
    assert answer.status_code == 202, answer.text


async def _seen(page: Any) -> dict[str, Any]:
    seen: dict[str, Any] = json.loads(await page.evaluate(
        f"""JSON.stringify({{
            first: {CARD}.children[1].className,
            attention: [...{CARD}.querySelectorAll('[data-attention]')].map((li) => li.dataset.attention),
            tools: [...{CARD}.querySelectorAll('.tool-review')].map((t) => t.dataset.tool),
            sees: Object.fromEntries([...{CARD}.querySelectorAll('[data-tool="notes_list_issues"] tr[data-output]')]
                .map((row) => [row.dataset.output, row.querySelector('.sees').textContent])),
            travels: Object.fromEntries([...{CARD}.querySelectorAll('[data-tool="notes_create_issue"] tr[data-input]')]
                .map((row) => [row.dataset.input, row.lastChild.textContent])),
            contract: {CARD}.querySelector('[data-tool="notes_create_issue"] .contract')?.textContent ?? '',
            added: [...{CARD}.querySelectorAll('[data-changed] > pre.unified .add')].map((l) => l.textContent),
            settings: [...{CARD}.querySelectorAll('.settings-diff .add')].map((l) => l.textContent),
            boxes: [...{CARD}.querySelectorAll('input[data-acknowledge]')].map((box) => box.dataset.acknowledge),
        }})"""
    ))  # fmt: skip
    return seen


async def test_in_a_browser_an_adapters_review_shows_its_tools_and_an_update_is_accepted_only_acknowledged(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """A new adapter shows each tool's inputs (where each travels), outputs (what the model sees) and write
    contract. An update moving the base URL and making 409 mean "applied" shows the move first, above
    everything, the tool's change in words, and an accept that needs the move ticked: accepted then."""
    settings = Settings(
        redis_url=redis_url,
        adapters={},
        orgs=(OrgSettings(name="acme", adapters=frozenset({"notes"}), roles=frozenset({"staff", "registry"})),),
        audit_secret=Secret(TEST_AUDIT_SECRET),
        registry_poll_seconds=0.2,
        demo=True,  # the console takes a pasted admin key; any loopback base URL is allowed
    )
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    service = await make_key(redis, kind=KeyKind.SERVICE, subject="notes-svc", org="acme", roles=())
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        await _put(base, service, issues_manifest("http://127.0.0.1:8001"))
        async with browser(tmp_path / "profile") as page:
            await page.send("Page.navigate", {"url": f"{base}/admin/#key={admin}&next=/adapters"})
            await page.until(f"{CARD}?.querySelector('.tool-review') != null")
            new = await _seen(page)
            assert new["tools"] == ["notes_list_issues", "notes_create_issue"] and new["attention"] == []
            assert new["sees"] == {
                "items[].number": "shown", "items[].title": "withheld",
                "items[].html_url": "trusted: pattern", "items[].labels[]": "withheld",
            }  # fmt: skip
            assert new["travels"]["api_version"] == "header as X-Api-Version" and new["travels"]["repo"] == "path"
            assert "a marker appended to the input body" in new["contract"] and "never" in new["contract"]
            await page.evaluate(f"window.confirm = () => true; {CARD}.querySelector('[data-accept]').click()")
            await page.until("document.querySelector('.notice.ok')?.textContent")

            moved = issues_manifest("http://127.0.0.1:8002", applied_statuses=[409], not_applied_statuses=[404])
            await _put(base, service, moved)
            await page.evaluate("location.hash = '#/cards'")
            await page.evaluate("location.hash = '#/adapters'")
            await page.until(f"{CARD}?.querySelector('[data-attention]') != null")
            update = await _seen(page)
            await screenshot(page, shots(tmp_path) / "adapter-update-review.png", full_page=True)
            assert update["first"] == "flags attention" and update["attention"] == ["base_url"]
            assert '+  "base_url": "http://127.0.0.1:8002",' in update["settings"]
            assert "+  write contract applied: 409" in update["added"]
            assert update["boxes"] == ["base_url"]
            # Unticked, the browser does not send the form (the submit handler, which asks first, never runs).
            asked = "window.confirm = () => { window.asked = true; return true; };"
            await page.evaluate(f"{asked} {CARD}.querySelector('[data-accept]').click()")
            assert await page.evaluate("window.asked === undefined") is True
            await page.evaluate(
                f"{CARD}.querySelector('input[data-acknowledge=\"base_url\"]').click();"
                f"{CARD}.querySelector('[data-accept]').click()"
            )
            said = await page.until("document.querySelector('.notice.ok')?.textContent")
            assert said.startswith("Accepted notes at ")
        with anyio.fail_after(5):
            while (registration := await RegistryStore(redis).get("notes")) is None or registration.pinned is None:
                await anyio.sleep(0.05)
        assert registration.pinned["base_url"] == "http://127.0.0.1:8002"
