"""The console's overview in a real browser: every chart drawn from a seeded ledger, each chart's table
holding the admin API's numbers, live like the card list, and screenshots in light and dark mode."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette

from backends.serve import serve_app_in_thread
from gateway.admin.api import admin_routes
from gateway.approvals.service import CardService
from gateway.cards.card import CardState
from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import AddressBudgets
from gateway.principal import KeyKind
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.web.console import console_routes
from tests.support.agents import make_key
from tests.support.browser import Page, browser, screenshot, shots
from tests.support.cards import PROPOSAL, approve
from tests.support.console_signin import demo_signin_routes
from tests.support.guards import always_writable
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

BACKENDS = {"orders": False, "rooms": True}
"""What the health checks report in this test: one backend down, so the chart shows both kinds."""

CHARTS = ["chart-hours", "chart-time-tool", "chart-time-role", "chart-open", "chart-writes", "chart-health"]

_TABLES = """JSON.stringify(Object.fromEntries([...document.querySelectorAll('figure.chart')].map((figure) => [
  figure.id,
  [...figure.querySelectorAll('table.chart-data tbody tr')].map((tr) => ({
    start: tr.dataset.start || null,
    cells: [...tr.children].map((cell) => cell.textContent),
  })),
])))"""


@pytest.fixture(scope="module")
def overview_console(quiet_redis_url: str) -> Iterator[str]:
    """The admin API (with the backends' health) and the console over the database no worker drains."""
    client = Redis.from_url(quiet_redis_url)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()

    ledger = RedisLedger(client)
    audit = RedisStreamAuditSink(client, secret=TEST_AUDIT_SECRET.encode())
    service = CardService(ledger, audit, writable=always_writable, changes=ledger.changes)
    routes = admin_routes(service, keys=KeyStore(client), audit=audit, floods=AddressBudgets(Limits().unauthenticated),
                          backends=lambda: dict(BACKENDS))  # fmt: skip
    routes += demo_signin_routes(client, audit)
    with serve_app_in_thread(Starlette(routes=[*routes, *console_routes()], lifespan=lifespan), lifespan=True) as base:
        yield base


@pytest.fixture
async def quiet(quiet_redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(quiet_redis_url)
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


async def _propose(ledger: RedisLedger, **changes: Any) -> str:
    changes = {"decide_within_ms": 3 * 3_600_000, "execute_within_ms": 3 * 3_600_000, **changes}
    result = await ledger.propose(replace(PROPOSAL, dedupe_key=secrets.token_hex(8), **changes))
    assert result.card is not None, result.status
    return result.card.card_id


async def _run(ledger: RedisLedger, card_id: str, outcome: CardState) -> None:
    await approve(ledger, card_id)
    claimed = await ledger.claim(card_id, worker="w1", lease_ms=10_000)
    assert claimed.card is not None, claimed.status
    assert (await ledger.dispatch(card_id, fence=claimed.card.fence)).ok
    done = await ledger.complete(card_id, fence=claimed.card.fence, outcome=outcome, reference="", evidence={},
                                 settle_ms=0)  # fmt: skip
    assert done.ok, done.status


async def _seed(redis: Redis) -> dict[str, str]:
    """Cards in every state the charts show, of two tools and two approver roles; their ids by what they are."""
    ledger = RedisLedger(redis, limits=Limits(open_cards_per_requester=1_000))
    refund = {"tool": "orders_refund", "approver_role": "finance", "summary": "Refund order ord-1001"}
    seeded = {
        "pending": await _propose(ledger),
        "expiring": await _propose(ledger, decide_within_ms=20 * 60_000, summary="Book room-eos before it lapses"),
        "approved": await _propose(ledger),
        "succeeded": await _propose(ledger),
        "succeeded-refund": await _propose(ledger, **refund),
        "failed": await _propose(ledger, **refund),
        "unknown": await _propose(ledger),
        "rejected": await _propose(ledger),
        "cancelled": await _propose(ledger),
    }
    await approve(ledger, seeded["approved"])
    await _run(ledger, seeded["succeeded"], CardState.SUCCEEDED)
    await _run(ledger, seeded["succeeded-refund"], CardState.SUCCEEDED)
    await _run(ledger, seeded["failed"], CardState.FAILED)
    await _run(ledger, seeded["unknown"], CardState.UNKNOWN)
    assert (await ledger.reject(seeded["rejected"], admin="root@acme.example", reason="not now")).ok
    assert (await ledger.cancel(seeded["cancelled"], actor="alice@acme.example")).ok
    return seeded


async def _api_overview(base: str, key: str, window: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=f"{base}/admin/api", timeout=10) as http:
        answer = await http.get("/overview", params={"window": window}, headers={"authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _ms(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp() * 1000


def _same_numbers(tables: dict[str, list[dict[str, Any]]], api: dict[str, Any], shown_at: str) -> None:
    """Each chart's table holds the API's numbers, row for row. Worker lag grows with the clock: the page's
    value plus the time between the two answers is the API's."""
    assert list(tables) == CHARTS
    hours = tables["chart-hours"]
    assert [row["start"] for row in hours] == [hour["start"] for hour in api["cards_per_hour"]]
    assert [[int(c) for c in row["cells"][1:]] for row in hours] == [
        [hour["counts"][name] for name in api["outcomes"]] for hour in api["cards_per_hour"]
    ]
    for chart, key in (("chart-time-tool", "decision_time_by_tool"), ("chart-time-role", "decision_time_by_role")):
        shown = [(row["cells"][0], int(row["cells"][1]), float(row["cells"][2]), float(row["cells"][3]))
                 for row in tables[chart]]  # fmt: skip
        assert shown == [(t["name"], t["cards"], t["median_seconds"], t["p90_seconds"]) for t in api[key]]
    ages = [(row["cells"][0], int(row["cells"][1]), int(row["cells"][2])) for row in tables["chart-open"]]
    assert ages == [(a["age"], a["pending"], a["approved"]) for a in api["open_by_age"]]
    writes = [(row["cells"][0], int(row["cells"][1])) for row in tables["chart-writes"]]
    assert writes == [(w["state"], w["count"]) for w in api["writes"]]
    health = {row["cells"][0]: row["cells"][1] for row in tables["chart-health"]}
    elapsed = (_ms(api["generated_at"]) - _ms(shown_at)) / 1000
    assert float(health.pop("Worker lag (s)")) + elapsed == pytest.approx(api["worker_lag_seconds"], abs=0.002)
    assert health == {f"Backend {name}": "answering" if ok else "not answering" for name, ok in api["backends"].items()}


async def _shown(page: Page) -> tuple[dict[str, list[dict[str, Any]]], str]:
    await page.until("document.querySelectorAll('figure.chart').length === 6")
    tables = json.loads(await page.evaluate(_TABLES))
    shown_at = await page.evaluate("document.querySelector('.overview-grid').dataset.generatedAt")
    return tables, shown_at


async def test_in_a_browser_the_overview_draws_every_chart_with_the_admin_apis_numbers_in_light_and_dark(
    overview_console: str, quiet: Redis, tmp_path: Path
) -> None:
    """Seeded cards of every kind: each chart is drawn (SVG) and its table holds the API's numbers, for
    24 hours and 7 days; the card expiring within the hour is named, and the FAILED and UNKNOWN writes
    link to their cards. Screenshots at 1280x900 in light and dark mode show it; a new card appears in
    the chart without a reload."""
    bob = await make_key(quiet, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver",))
    seeded = await _seed(quiet)
    folder = shots(tmp_path)
    async with browser(tmp_path / "profile") as page:
        await page.send("Page.navigate", {"url": f"{overview_console}/admin/#key={bob}&next=/overview"})
        await page.until("document.querySelector('.overview-grid') !== null")
        for window in ("24h", "7d"):
            await page.evaluate(f"location.hash = '#/overview?window={window}'")
            await page.until(f"document.querySelector('.windows a.current')?.getAttribute('href') === "
                             f"'#/overview?window={window}'")  # fmt: skip
            tables, shown_at = await _shown(page)
            api = await _api_overview(overview_console, bob, window)
            if api["cards_per_hour"][-1]["start"] != tables["chart-hours"][-1]["start"]:  # an hour turned: read again
                await page.evaluate("location.reload()")
                tables, shown_at = await _shown(page)
                api = await _api_overview(overview_console, bob, window)
            _same_numbers(tables, api, shown_at)
            assert len(tables["chart-hours"]) == (24 if window == "24h" else 168)

        await page.evaluate("location.hash = '#/overview?window=24h'")
        await page.until("document.querySelectorAll('#chart-hours tbody tr').length === 24")
        drawn = json.loads(await page.evaluate(
            """JSON.stringify({
                bars: document.querySelectorAll('#chart-hours svg rect').length,
                svgs: [...document.querySelectorAll('figure.chart svg')].map((s) => s.closest('figure').id),
                hiddenFromReaders: [...document.querySelectorAll('figure.chart svg')].every(
                    (s) => s.getAttribute('aria-hidden') === 'true'),
                expiring: [...document.querySelectorAll('#expiring.soon a')].map((a) => a.getAttribute('href')),
                failed: [...document.querySelectorAll('a[data-write="FAILED"]')].map((a) => a.getAttribute('href')),
                unknown: [...document.querySelectorAll('a[data-write="UNKNOWN"]')].map((a) => a.getAttribute('href')),
                down: [...document.querySelectorAll('ul.backends li.down code')].map((c) => c.textContent),
            })"""
        ))  # fmt: skip
        assert drawn["bars"] >= 5  # one stacked segment per outcome of the seeded hour
        assert drawn["svgs"] == CHARTS[:-1] and drawn["hiddenFromReaders"]
        assert drawn["expiring"] == [f"#/cards/{seeded['expiring']}"]
        assert drawn["failed"] == [f"#/cards/{seeded['failed']}"]
        assert drawn["unknown"] == [f"#/cards/{seeded['unknown']}"]
        assert drawn["down"] == ["orders"]

        light = await page.evaluate("getComputedStyle(document.querySelector('figure.chart')).backgroundColor")
        await screenshot(page, folder / "overview-light.png", full_page=True)
        await page.send("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        dark = await page.evaluate("getComputedStyle(document.querySelector('figure.chart')).backgroundColor")
        await screenshot(page, folder / "overview-dark.png", full_page=True)
        assert light == "rgb(255, 255, 255)" and dark != light

        # Live: a card proposed elsewhere is counted in the chart without a reload.
        await page.evaluate("window.notReloaded = true")
        waiting = "[...document.querySelectorAll('#chart-hours tbody tr')].at(-1).children[1].textContent"
        before = int(await page.evaluate(waiting))
        await _propose(RedisLedger(quiet, limits=Limits(open_cards_per_requester=1_000)))
        await page.until(f"Number({waiting}) === {before + 1} && window.notReloaded === true")
    for name in ("overview-light.png", "overview-dark.png"):
        assert (folder / name).read_bytes().startswith(b"\x89PNG")
