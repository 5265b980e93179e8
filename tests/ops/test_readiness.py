"""``/readyz`` and ``/healthz`` against a real Redis that is stopped, frozen, or not durable, over real HTTP."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.serve import serve_app_in_thread
from gateway.runtime.app import create_app
from tests.support.redis_server import free_port, start_redis_process, start_redis_server
from tests.support.services import Backend, gateway_settings

PROBE_BOUND_SECONDS = 5.0
"""A probe answers within this even when Redis is frozen (each Redis command is bounded at 0.5 s)."""


def _ready(base: str) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    answer = httpx.get(f"{base}/readyz", timeout=PROBE_BOUND_SECONDS)
    return answer.status_code, answer.json(), time.monotonic() - started


def _until(base: str, status: int, also: Callable[[dict[str, Any]], bool] = lambda body: True) -> dict[str, Any]:
    """Poll /readyz (bounded) until it answers `status` with a body `also` accepts; the background checks
    settle within a few polls."""
    deadline = time.monotonic() + 15
    while True:
        code, body, _ = _ready(base)
        if code == status and also(body):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


@pytest.mark.slow
def test_readiness_follows_redis_when_frozen_and_stopped_while_liveness_stays_up(
    backends: dict[str, Backend], tmp_path: Path
) -> None:
    """Ready with every check passing; a frozen Redis and then a stopped one make it 503 with the reason,
    within the probe bound, while /healthz keeps answering 200."""
    with start_redis_process(appendonly=True) as (url, pid):
        settings = replace(gateway_settings(url, backends), audit_archive_dir=tmp_path / "audit")
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:
            body = _until(base, 200)
            assert body["ready"] is True
            assert {name for name, check in body["checks"].items() if check["ok"]} == {
                "redis", "ledger", "audit", "adapters", "worker",
            }  # fmt: skip
            assert body["checks"]["adapters"]["adapters"] == {"rooms": True, "orders": True}

            os.kill(pid, signal.SIGSTOP)
            try:
                code, frozen, took = _ready(base)
                assert httpx.get(f"{base}/healthz", timeout=PROBE_BOUND_SECONDS).json() == {"ok": True}
            finally:
                os.kill(pid, signal.SIGCONT)
            assert code == 503 and took < PROBE_BOUND_SECONDS
            assert frozen["ready"] is False and frozen["checks"]["redis"]["ok"] is False
            assert "does not answer" in frozen["checks"]["redis"]["reason"]
            assert frozen["checks"]["ledger"]["reason"].startswith("skipped")

            _until(base, 200)  # thawed: ready again, no restart
            os.kill(pid, signal.SIGTERM)
            # A server shutting down may still answer PING while another check already fails: wait for the stop.
            stopped = _until(base, 503, lambda body: body["checks"]["redis"]["ok"] is False)
            assert "does not answer" in stopped["checks"]["redis"]["reason"]
            assert httpx.get(f"{base}/healthz", timeout=PROBE_BOUND_SECONDS).status_code == 200


def test_a_ledger_that_is_not_durable_a_backend_that_is_down_and_an_unwritable_archive_are_each_named(
    backends: dict[str, Backend], tmp_path: Path
) -> None:
    """Each failing check says what an operator has to fix."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with start_redis_server(appendonly=False) as url:
        base_settings = gateway_settings(url, backends)
        dead = replace(base_settings.adapters["orders"], url=f"http://127.0.0.1:{free_port()}", timeout_seconds=0.5)
        settings = replace(
            base_settings,
            adapters={**base_settings.adapters, "orders": dead},
            audit_archive_dir=blocker / "audit",
            health_poll_seconds=0.1,
            run_worker=False,
        )
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:
            deadline = time.monotonic() + 15
            while True:
                code, body, _ = _ready(base)
                if not body["checks"]["adapters"]["ok"]:
                    break
                assert time.monotonic() < deadline, body
                time.sleep(0.1)
    checks = body["checks"]
    assert code == 503 and body["ready"] is False
    assert checks["redis"]["ok"] is True
    assert checks["ledger"] == {"ok": False, "reason": "appendonly is off"}
    assert "not writable" in checks["audit"]["reason"]
    assert checks["adapters"]["adapters"] == {"rooms": True, "orders": False}
    assert checks["adapters"]["reason"] == "unhealthy: orders"
    assert "worker" not in checks  # this process runs none


@pytest.mark.parametrize("path", ["/readyz", "/healthz"])
def test_probes_are_json_and_need_no_key(path: str, redis_url: str, backends: dict[str, Backend]) -> None:
    """An orchestrator's probe carries no credential."""
    with serve_app_in_thread(create_app(gateway_settings(redis_url, backends)), lifespan=True) as base:
        answer = httpx.get(f"{base}{path}", timeout=PROBE_BOUND_SECONDS)
    assert answer.headers["content-type"] == "application/json"
    assert answer.status_code in (200, 503)
