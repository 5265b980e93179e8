"""The operations surface: ``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus).

Who uses it: the composition root mounts `ops_routes`. It translates and decides nothing: the
checks are `gateway.ops.readiness`, the instruments `gateway.telemetry.metrics`, the ledger's gauges
`gateway.store.probes`.

* ``GET /healthz``: 200 ``{"ok": true}`` while the process answers HTTP. It touches nothing else, so
  an orchestrator does not restart a healthy process because Redis blinked.
* ``GET /readyz``: 200 when every check passes, else 503; both JSON with each check's verdict and
  reason, so a load balancer stops sending traffic and a person sees why.
* ``GET /metrics``: the Prometheus text format. Who may scrape it: with no metrics token configured,
  only a peer on the loopback interface (the default: a fresh install exposes nothing to the
  network); with one (``[gateway] metrics_token_env``, default ``COUNTERSIGN_METRICS_TOKEN``), only a
  request carrying it as ``Authorization: Bearer …``, from anywhere. A token is the way in production:
  a reverse proxy on the same host makes every request a loopback one. Refusals are 403
  ``PERMISSION_DENIED``, as JSON, and audited (``metrics.scrape``).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from starlette.datastructures import Secret
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.audit.events import AuditEvent, AuditSink
from gateway.codes import Code
from gateway.errors import StoreUnavailableError
from gateway.ops.health import AdapterHealth
from gateway.ops.readiness import Readiness
from gateway.store.client import Connection
from gateway.store.durability import LedgerGuard
from gateway.store.probes import LedgerProbe
from gateway.telemetry.metrics import CONTENT_TYPE, Gauges, render

__all__ = ["is_loopback", "ops_routes"]


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ops_routes(
    *,
    redis: Connection,
    guard: LedgerGuard,
    adapters: AdapterHealth,
    audit: AuditSink,
    archive_dir: Path,
    metrics_token: Secret | None,
    worker_running: Callable[[], bool] | None,
    policies: Callable[[], Mapping[str, Any]],
) -> list[Route]:
    """The three routes over the process's Redis connection. `metrics_token` None: ``/metrics`` answers
    loopback peers only; `worker_running` None: this process runs no worker. `policies` says which policy set is
    in force (and why a newer one was refused), for ``/readyz``."""
    probe = LedgerProbe(redis.client)
    readiness = Readiness(
        redis=redis, guard=guard, probe=probe, archive_dir=archive_dir, adapters=adapters, worker_running=worker_running
    )
    token = str(metrics_token) if metrics_token is not None else ""
    expected = token.encode() if token else None

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def readyz(request: Request) -> JSONResponse:
        report = await readiness.check()
        body = {**report.to_json(), "policies": dict(policies())}
        return JSONResponse(body, status_code=200 if report.ready else 503)

    def refusal(request: Request) -> str | None:
        peer = request.client.host if request.client is not None else None
        if expected is None:
            return None if is_loopback(peer) else "not a loopback peer, and no metrics token is configured"
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected):
            return None
        return "missing or wrong metrics token"

    async def metrics(request: Request) -> Response:
        reason = refusal(request)
        if reason is not None:
            peer = request.client.host if request.client is not None else ""
            event = AuditEvent(
                action="metrics.scrape",
                outcome="deny",
                code=Code.PERMISSION_DENIED.value,
                reason=reason,
                extra={"client": peer},
            )
            await audit.record(event)
            body = {"error": Code.PERMISSION_DENIED.value, "message": reason}
            return JSONResponse(body, status_code=403)
        try:
            values = await probe.gauges()
            open_cards, lag = values.open_cards, values.worker_lag_seconds
        except StoreUnavailableError:
            open_cards, lag = None, None  # absent from this scrape; ledger_durable says why
        gauges = Gauges(open_cards=open_cards, worker_lag_seconds=lag, ledger_durable=await guard.writable())
        return Response(render(gauges), media_type=CONTENT_TYPE)

    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
