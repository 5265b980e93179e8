"""Headless Chromium driven over the DevTools protocol, for the console's browser tests.

`browser` starts Chromium (``chromium``, ``chromium-browser`` or ``google-chrome`` on PATH) with a
profile of its own and yields a `Page`; without Chromium a test skips on a developer's machine and
fails in CI (`CI` set), where `.ci/run` installs it. `screenshot` captures what the approver sees at
`FOLD`, or the whole page, as a PNG, into `shots` (``COUNTERSIGN_SCREENSHOTS`` when set).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NoReturn

import anyio
import pytest

__all__ = ["FOLD", "Page", "browser", "screenshot", "shots"]

FOLD = (1280, 900)
"""The screen an approver is assumed to have: the decision and its buttons must fit in it unscrolled."""


def _chromium() -> str | None:
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


def _without_browser(reason: str) -> NoReturn:
    """Skip on a developer's machine; fail in CI (`CI` set), where `.ci/run` installs Chromium, so a CI
    run can never pass without having driven the console in a browser."""
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason}, and CI must run the browser test (.ci/run installs Chromium)", pytrace=False)
    pytest.skip(reason)


class Page:
    """Just enough of the Chrome DevTools Protocol: commands on one page, and the dialogs it opened."""

    def __init__(self, socket: Any, session: str) -> None:
        self._socket = socket
        self._session = session
        self._next_id = 0
        self.dialogs: list[str] = []

    async def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = True) -> Any:
        self._next_id += 1
        mine = self._next_id  # a dialog handled while waiting sends a command of its own, with the next id
        message: dict[str, Any] = {"id": mine, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        await self._socket.send(json.dumps(message))
        while True:
            answer = json.loads(await self._socket.recv())
            if answer.get("method") == "Page.javascriptDialogOpening":
                self.dialogs.append(answer["params"]["message"])
                await self.send("Page.handleJavaScriptDialog", {"accept": False})
            if answer.get("id") == mine:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result["result"].get("value")

    async def frame(self, name: str) -> Page | None:
        """The frame whose window is named `name`, as a page of its own: a sandboxed iframe runs in a process
        (a target) of its own, which the page's ``Runtime.evaluate`` does not reach. None while there is none."""
        targets = await self.send("Target.getTargets", session=False)
        for target in targets["targetInfos"]:
            if target["type"] != "iframe":
                continue
            attached = await self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True},
                                       session=False)  # fmt: skip
            frame = Page(self._socket, attached["sessionId"])
            frame._next_id = self._next_id  # one socket: ids stay unique across the sessions on it
            if await frame.evaluate("window.name") == name:
                self._next_id = frame._next_id
                return frame
            self._next_id = frame._next_id
        return None

    async def until(self, expression: str, *, seconds: float = 10) -> Any:
        with anyio.fail_after(seconds):
            while not (value := await self.evaluate(expression)):
                await anyio.sleep(0.05)
        return value


@asynccontextmanager
async def browser(profile: Path) -> AsyncIterator[Page]:
    try:
        from websockets.asyncio import client as websockets
    except ImportError:
        _without_browser("no websockets client to drive Chromium with")
    chromium = _chromium()
    if chromium is None:
        _without_browser("no Chromium on this machine")
    flags = ["--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1280,900"]  # fmt: skip
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
            browser = Page(socket, "")
            target = await browser.send("Target.createTarget", {"url": "about:blank"}, session=False)
            attached = await browser.send(
                "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, session=False
            )
            page = Page(socket, attached["sessionId"])
            await page.send("Page.enable")
            yield page
    finally:
        process.terminate()
        process.wait(10)


def shots(tmp_path: Path) -> Path:
    """Where screenshots go: ``COUNTERSIGN_SCREENSHOTS`` when set, else the test's own directory."""
    folder = Path(os.environ.get("COUNTERSIGN_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def screenshot(page: Page, path: Path, *, full_page: bool = False) -> None:
    """The viewport at `FOLD`, as a PNG: exactly what the approver sees before scrolling; with `full_page`,
    the whole page laid out at `FOLD`'s width."""
    width, height = FOLD
    await page.send("Emulation.setDeviceMetricsOverride",
                    {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})  # fmt: skip
    await page.evaluate("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    options: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
    if full_page:
        full = await page.evaluate("document.documentElement.scrollHeight")
        options["clip"] = {"x": 0, "y": 0, "width": width, "height": max(int(full), height), "scale": 1}
    shot = await page.send("Page.captureScreenshot", options)
    path.write_bytes(base64.b64decode(shot["data"]))
