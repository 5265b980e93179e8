"""The operations surface: liveness, readiness, metrics and backend health.

* `api` — ``/healthz``, ``/readyz`` and ``/metrics``;
* `readiness` — can this gateway do its job now (Redis, durability, audit, worker);
* `health` — which backends answer; an unhealthy adapter's reads fail fast.

May import: the store's probes, `gateway.telemetry` and the vocabulary. Who uses it: the composition root.
"""
