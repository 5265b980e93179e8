"""The admin web console: served with a strict policy, built without HTML parsing, working in a browser."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path
from typing import Any, NoReturn

import anyio
import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette

from gateway.console import console_routes
from gateway.preview import Preview
from gateway.principal import KeyKind
from gateway.provenance import Provenance, ProvenanceFlag, ProvenanceRead
from gateway.store.ledger import RedisLedger
from tests.support.agents import make_key
from tests.support.cards import PROPOSAL, flood

pytestmark = pytest.mark.anyio

ASSETS = files("gateway") / "console_assets"
HOSTILE = "<img src=x onerror=alert(1)>"

STRICT_CSP = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "connect-src": "'self'",
    "frame-ancestors": "'none'",
    "base-uri": "'none'",
    "form-action": "'none'",
}


def _policy(header: str) -> dict[str, str]:
    directives = (part.strip().split(None, 1) for part in header.split(";") if part.strip())
    return {name: value for name, value in directives}


@asynccontextmanager
async def _console() -> AsyncIterator[httpx.AsyncClient]:
    app = Starlette(routes=console_routes())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as http:
        yield http


@pytest.mark.parametrize(
    ("path", "media_type"),
    [("/admin/", "text/html"), ("/admin/console.js", "text/javascript"), ("/admin/console.css", "text/css")],
)
async def test_page_and_assets_are_served_with_a_strict_policy_and_no_caching(path: str, media_type: str) -> None:
    """Each file carries the CSP, nosniff, no-referrer and no-store, with its exact media type."""
    async with _console() as http:
        response = await http.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].split(";")[0] == media_type
    policy = _policy(response.headers["content-security-policy"])
    assert {name: policy.get(name) for name in STRICT_CSP} == STRICT_CSP
    assert "'unsafe-inline'" not in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["cache-control"] == "no-store"


async def test_admin_without_slash_redirects_to_the_console() -> None:
    """``/admin`` sends the browser to ``/admin/``, where relative asset and API paths resolve."""
    async with _console() as http:
        response = await http.get("/admin")
    assert response.status_code == 308 and response.headers["location"] == "/admin/"


async def test_the_console_is_wired_into_the_gateway_without_shadowing_the_admin_api(mcp_url: str) -> None:
    """The gateway serves the page without a key, and every API path still answers for itself."""
    base = mcp_url.removesuffix("/mcp")
    async with httpx.AsyncClient(base_url=base, timeout=5) as http:
        page = await http.get("/admin/")
        api = [await http.get(path) for path in ("/admin/api/cards", "/admin/api/adapters/", "/admin/api/openapi.json")]
    assert page.status_code == 200 and "<title>Countersign admin console</title>" in page.text
    assert [answer.status_code for answer in api] == [401, 401, 401]


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_text.append(data)


def test_page_has_no_inline_script_style_or_handlers() -> None:
    """Scripts and styles come only from the gateway's own files; no element carries code or style."""
    markup = _Markup()
    markup.feed((ASSETS / "index.html").read_text())
    scripts = [attrs.get("src") for tag, attrs in markup.tags if tag == "script"]
    sheets = [attrs.get("href") for tag, attrs in markup.tags if tag == "link" and attrs.get("rel") == "stylesheet"]
    assert scripts == ["console.js"] and sheets == ["console.css"]
    assert "".join(markup.script_text).strip() == ""
    assert not [tag for tag, _ in markup.tags if tag in {"style", "iframe", "object", "embed", "base"}]
    for tag, attrs in markup.tags:
        assert not [name for name in attrs if name == "style" or name.startswith("on")], tag


def test_console_files_never_parse_data_as_html_and_need_nothing_from_elsewhere() -> None:
    """The script has no HTML sink or string evaluation; no file loads anything from another origin."""
    script = (ASSETS / "console.js").read_text()
    sinks = ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
             "createContextualFragment", "DOMParser", "srcdoc", "localStorage"]  # fmt: skip
    assert [sink for sink in sinks if sink in script] == []
    assert not re.search(r"set(Timeout|Interval)\(\s*['\"`]", script)
    assert "sessionStorage" in script and "history.replaceState" in script
    for name in ("index.html", "console.js", "console.css"):
        text = (ASSETS / name).read_text()
        assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|@import|url\(", text), name


# -- in a real browser ------------------------------------------------------------------------------


def _chromium() -> str | None:
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


def _without_browser(reason: str) -> NoReturn:
    """Skip on a developer's machine; fail in CI (`CI` set), where `.ci/run` installs Chromium, so a CI
    run can never pass without having driven the console in a browser."""
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason}, and CI must run the browser test (.ci/run installs Chromium)", pytrace=False)
    pytest.skip(reason)


class _Page:
    """Just enough of the Chrome DevTools Protocol: commands on one page, and the dialogs it opened."""

    def __init__(self, socket: Any, session: str) -> None:
        self._socket = socket
        self._session = session
        self._next_id = 0
        self.dialogs: list[str] = []

    async def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = True) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        await self._socket.send(json.dumps(message))
        while True:
            answer = json.loads(await self._socket.recv())
            if answer.get("method") == "Page.javascriptDialogOpening":
                self.dialogs.append(answer["params"]["message"])
                await self.send("Page.handleJavaScriptDialog", {"accept": False})
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result["result"].get("value")

    async def until(self, expression: str) -> Any:
        with anyio.fail_after(10):
            while not (value := await self.evaluate(expression)):
                await anyio.sleep(0.05)
        return value


@asynccontextmanager
async def _browser(profile: Path) -> AsyncIterator[_Page]:
    try:
        from websockets.asyncio import client as websockets
    except ImportError:
        _without_browser("no websockets client to drive Chromium with")
    chromium = _chromium()
    if chromium is None:
        _without_browser("no Chromium on this machine")
    flags = ["--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1280,1000"]  # fmt: skip
    if os.geteuid() == 0:
        flags.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    process = subprocess.Popen([chromium, *flags, "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        with anyio.fail_after(30):
            while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
                await anyio.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        async with websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as socket:
            browser = _Page(socket, "")
            target = await browser.send("Target.createTarget", {"url": "about:blank"}, session=False)
            attached = await browser.send(
                "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, session=False
            )
            page = _Page(socket, attached["sessionId"])
            await page.send("Page.enable")
            yield page
    finally:
        process.terminate()
        process.wait(10)


async def test_in_a_browser_hostile_agent_text_stays_text_and_approve_sends_what_is_shown(
    mcp_url: str, redis: Redis, tmp_path: Path
) -> None:
    """A key from a link is kept in the tab and dropped from the address; the agent's markup is shown as
    text in the untrusted box, never run; Approve records this admin's approval; sign-out forgets the key."""
    key = await make_key(redis, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver",))
    agent_text = {"title": HOSTILE, "note": "pay\u202eme"}
    created = await RedisLedger(redis).propose(
        replace(PROPOSAL, agent_text=agent_text, dedupe_key=f"console|{secrets.token_hex(8)}")
    )
    assert created.card is not None
    card_id = created.card.card_id
    base = mcp_url.removesuffix("/mcp")

    async with _browser(tmp_path / "profile") as page:
        await page.send("Page.navigate", {"url": f"{base}/admin/#key={key}&next=/cards/{card_id}"})
        await page.until("document.querySelector('#card-detail') !== null")
        seen = await page.evaluate(
            """JSON.stringify({
                href: location.href,
                stored: sessionStorage.getItem("countersign.adminKey"),
                images: document.images.length,
                box: document.querySelector("#agent-text h3").textContent,
                title: document.querySelector('#agent-text [data-field="title"]').textContent,
                hidden: document.querySelectorAll('#agent-text .hidden-char').length,
                decision: document.querySelector("#card-decision").textContent,
                outcome: document.querySelector("#card-outcome").textContent,
            })"""
        )
        shown = json.loads(seen)
        assert shown["href"] == f"{base}/admin/#/cards/{card_id}" and shown["stored"] == key
        assert shown["images"] == 0 and shown["title"] == HOSTILE and shown["hidden"] == 1
        assert shown["box"] == "Untrusted — written by the requesting agent"
        assert (shown["decision"], shown["outcome"]) == ("pending", "none")

        await page.evaluate("document.querySelector('#approve-button').click()")
        result = await page.until("document.querySelector('#action-result')?.textContent")
        assert "the card is now APPROVED" in result
        card = await RedisLedger(redis).get(card_id)
        assert card is not None and card.approvers == ("bob@acme.example",)

        await page.evaluate("document.querySelector('#sign-out').click()")
        after = await page.evaluate(
            "JSON.stringify([sessionStorage.length, document.querySelector('#view').childElementCount,"
            " document.querySelector('#sign-in').hidden])"
        )
        assert json.loads(after) == [0, 0, False]

        # A key in a link followed from the open page (a same-document navigation) is taken just the same.
        await page.evaluate(f"location.hash = '#key={key}&next=/cards'")
        assert await page.until("!document.querySelector('#view').hidden && location.href") == f"{base}/admin/#/cards"
        assert await page.evaluate("sessionStorage.getItem('countersign.adminKey')") == key
        assert page.dialogs == []


async def test_in_a_browser_the_list_follows_the_cursors_to_an_old_pending_card(
    mcp_url: str, redis: Redis, tmp_path: Path
) -> None:
    """Behind more newer PENDING cards than one batch shows, the oldest is one "Show more" away, listed once;
    then the list says everything is shown."""
    key = await make_key(redis, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver",))
    created = await RedisLedger(redis).propose(replace(PROPOSAL, dedupe_key=f"old|{secrets.token_hex(8)}"))
    assert created.card is not None
    old = created.card.card_id
    newer = await flood(redis, 250)
    base = mcp_url.removesuffix("/mcp")
    rows = "[...document.querySelectorAll('#card-list tbody tr')].map((row) => row.dataset.cardId)"

    async with _browser(tmp_path / "profile") as page:
        await page.send("Page.navigate", {"url": f"{base}/admin/#key={key}&next=/cards?state=PENDING"})
        await page.until("document.querySelector('#more-cards') !== null")
        first = await page.evaluate(rows)
        assert len(first) == 200 and old not in first
        await page.evaluate("document.querySelector('#more-cards').click()")
        await page.until(f"document.querySelector('#card-list tr[data-card-id=\"{old}\"]') !== null")
        shown = await page.evaluate(rows)
        assert len(shown) == len(set(shown)) == 251 and set(shown) == {old, *newer} and shown[-1] == old
        assert await page.evaluate("document.querySelector('#more-cards') === null")
        assert await page.evaluate("document.querySelector('.list-more').textContent") == "All 251 cards shown."


async def test_in_a_browser_a_card_shows_its_preview_what_happened_and_local_times_with_their_zone(
    mcp_url: str, redis: Redis, tmp_path: Path
) -> None:
    """The preview's lines are listed as text above the arguments, the state is said in words, and the
    creation time is the browser's local time with its zone named."""
    key = await make_key(redis, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver",))
    lines = ("Refund 12.34 USD on order ord-1001", f"Most that can still be refunded: 400.00 USD {HOSTILE}")
    created = await RedisLedger(redis).propose(
        replace(PROPOSAL, preview=Preview(lines=lines, facts={"max": 40_000}), dedupe_key=secrets.token_hex(8))
    )
    assert created.card is not None
    base = mcp_url.removesuffix("/mcp")
    async with _browser(tmp_path / "profile") as page:
        await page.send("Page.navigate", {"url": f"{base}/admin/#key={key}&next=/cards/{created.card.card_id}"})
        await page.until("document.querySelector('#card-detail') !== null")
        seen = json.loads(await page.evaluate(
            """JSON.stringify({
                preview: [...document.querySelectorAll('#card-preview li')].map((li) => li.textContent),
                images: document.images.length,
                said: document.querySelector('#card-said').textContent,
                created: [...document.querySelectorAll('#card-detail dt')]
                    .find((dt) => dt.textContent === 'Created').nextElementSibling.textContent,
                zone: Intl.DateTimeFormat(undefined, {timeZoneName: 'short'}).formatToParts(new Date())
                    .find((part) => part.type === 'timeZoneName').value,
            })"""
        ))  # fmt: skip
    assert seen["preview"] == list(lines) and seen["images"] == 0
    assert seen["said"] == "waiting for approval (0 of 1)"
    assert seen["created"].endswith(seen["zone"]) and seen["zone"]


async def test_in_a_browser_a_tainted_card_shows_its_provenance_first(
    mcp_url: str, redis: Redis, tmp_path: Path
) -> None:
    """A tainted card opens with the tainted banner, the reads that came before it and the flags (the agent's
    words shown as text), above everything else on the card; an untainted card says it is not tainted."""
    key = await make_key(redis, kind=KeyKind.ADMIN, subject="bob@acme.example", roles=("approver",))
    tainted = Provenance(
        tainted=True,
        data_flow=True,
        reads=[
            ProvenanceRead(tool="rooms_availability", at="2026-12-01T08:00:00.000+00:00", untrusted_text=True,
                           private=False),
            ProvenanceRead(tool="rooms_my_bookings", at="2026-12-01T08:00:01.000+00:00", untrusted_text=False,
                           private=True),
        ],
        flags=[ProvenanceFlag(code="instruction_to_model", where="arguments.title", detail=HOSTILE)],
    )  # fmt: skip
    created = [
        await RedisLedger(redis).propose(replace(PROPOSAL, provenance=p, dedupe_key=secrets.token_hex(8)))
        for p in (tainted, Provenance(tainted=False, data_flow=False))
    ]
    ids = [c.card.card_id for c in created if c.card is not None]
    base = mcp_url.removesuffix("/mcp")
    seen_js = """JSON.stringify({
        tainted: document.querySelector('#card-provenance').dataset.tainted,
        banner: document.querySelector('#tainted-banner')?.textContent ?? null,
        flow: document.querySelector('#data-flow-banner') !== null,
        reads: [...document.querySelectorAll('#provenance-reads li')].map((li) => li.textContent),
        flags: [...document.querySelectorAll('#provenance-flags li')].map((li) => li.textContent),
        images: document.images.length,
        first: document.querySelector('#card-provenance').compareDocumentPosition(
            document.querySelector('#card-detail .status')) & Node.DOCUMENT_POSITION_FOLLOWING,
    })"""
    async with _browser(tmp_path / "profile") as page:
        await page.send("Page.navigate", {"url": f"{base}/admin/#key={key}&next=/cards/{ids[0]}"})
        await page.until("document.querySelector('#card-provenance') !== null")
        seen = json.loads(await page.evaluate(seen_js))
        assert seen["tainted"] == "true" and seen["banner"].startswith("Tainted:") and seen["flow"]
        assert [r.split(" · ")[0] for r in seen["reads"]] == ["rooms_availability", "rooms_my_bookings"]
        assert "untrusted text" in seen["reads"][0] and "private data" in seen["reads"][1]
        assert seen["flags"] == [f"instruction_to_model in arguments.title: {HOSTILE}"] and seen["images"] == 0
        assert seen["first"]
        await page.evaluate(f"location.hash = '#/cards/{ids[1]}'")
        await page.until(f"document.querySelector('#card-detail')?.dataset.cardId === '{ids[1]}'")
        plain = json.loads(await page.evaluate(seen_js))
        assert plain["tainted"] == "false" and plain["banner"] is None and not plain["flow"]
