"""Idempotent writes for the demo backends: the key store, the write wrapper and the status lookup.

Every write endpoint of rooms and orders is built with :func:`idempotent_write`, which alone decides
whether a write runs, replays or is refused; the business function behind it is synchronous, returns an
:class:`Outcome` and never sees the key. The contract the gateway relies on:

* ``Idempotency-Key`` is required; without it the answer is 400 ``missing_idempotency_key``.
* Keys are scoped to the caller's org, so one org can neither read nor collide with another's keys.
* The fingerprint covers method, path, calling subject and body (canonical JSON when it parses).
  Same key and fingerprint: the stored status and body again, with ``Idempotent-Replayed: true`` and no
  new effect. Same key, other fingerprint: 422 ``idempotency_key_reused``.
* Every answer except a 400 is remembered: 2xx as ``applied``, anything else (a definitive refusal such as
  409 ``slot_taken``) as ``refused``. A 400 never reached a decision, so a corrected retry may reuse the key.
* A record is forgotten ``ttl_seconds`` after it was made, on the injected monotonic clock.
* `IdempotencyStore.snapshot` and `restore` carry the records across a restart (a record's age is
  kept by wall-clock time, since the monotonic clock starts again); `idempotent_write` calls its
  ``after`` hook once an answer is remembered, which is where a service saves its state.

Lookup, decision and remembering happen without an ``await`` in between, so on one event loop two
concurrent requests with the same key cannot both apply.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from backends._http import ArgsT, Caller, Endpoint, caller_of, error, invalid_request, parse_args

KEY_HEADER = "idempotency-key"
REPLAYED_HEADER = "Idempotent-Replayed"

Clock = Callable[[], float]


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """What a business write decided: the status code and JSON body to answer with."""

    status_code: int
    body: Mapping[str, Any]

    @classmethod
    def refused(cls, status_code: int, code: str) -> Outcome:
        """A definitive refusal, e.g. ``Outcome.refused(409, "slot_taken")``."""
        return cls(status_code=status_code, body={"error": code})


@dataclass(frozen=True, kw_only=True, slots=True)
class IdempotencyRecord:
    """One remembered answer to a write."""

    key: str
    org: str
    fingerprint: str
    """Hash of method, path, subject and body; a replay must match it exactly."""
    status_code: int
    body: Mapping[str, Any]
    created: float
    """When the answer was made, on the store's monotonic clock."""

    @property
    def state(self) -> Literal["applied", "refused"]:
        return "applied" if 200 <= self.status_code < 300 else "refused"


class IdempotencyStore:
    """Remembered write answers keyed by ``(org, key)``, each forgotten ``ttl_seconds`` after it was made."""

    def __init__(self, *, ttl_seconds: float, clock: Clock) -> None:
        if not ttl_seconds > 0:
            raise ValueError(f"ttl_seconds must be positive, got {ttl_seconds!r}")
        self._ttl = ttl_seconds
        self._clock = clock
        # Insertion order is creation order, so expiry only ever pops from the front.
        self._records: dict[tuple[str, str], IdempotencyRecord] = {}

    def __len__(self) -> int:
        self._expire()
        return len(self._records)

    def get(self, org: str, key: str) -> IdempotencyRecord | None:
        """Return the live record for ``key`` in ``org``, or ``None`` if unknown or expired."""
        self._expire()
        return self._records.get((org, key))

    def remember(self, *, org: str, key: str, fingerprint: str, outcome: Outcome) -> IdempotencyRecord:
        """Store ``outcome`` as the answer for ``key`` in ``org``."""
        record = IdempotencyRecord(
            key=key,
            org=org,
            fingerprint=fingerprint,
            status_code=outcome.status_code,
            body=outcome.body,
            created=self._clock(),
        )
        self._records[(org, key)] = record
        return record

    def snapshot(self) -> list[dict[str, Any]]:
        """The live records as JSON data, each with the wall-clock time it was made."""
        self._expire()
        now, wall = self._clock(), time.time()
        return [
            {
                "key": r.key,
                "org": r.org,
                "fingerprint": r.fingerprint,
                "status_code": r.status_code,
                "body": dict(r.body),
                "made_at": wall - (now - r.created),
            }
            for r in self._records.values()
        ]

    def restore(self, records: list[dict[str, Any]]) -> None:
        """Put back records a `snapshot` took, each as old as it was by the wall clock."""
        now, wall = self._clock(), time.time()
        for raw in sorted(records, key=lambda r: float(r["made_at"])):
            record = IdempotencyRecord(
                key=str(raw["key"]),
                org=str(raw["org"]),
                fingerprint=str(raw["fingerprint"]),
                status_code=int(raw["status_code"]),
                body=dict(raw["body"]),
                created=now - max(0.0, wall - float(raw["made_at"])),
            )
            self._records[(record.org, record.key)] = record
        self._expire()

    def _expire(self) -> None:
        cutoff = self._clock() - self._ttl
        while self._records:
            oldest_id, oldest = next(iter(self._records.items()))
            if oldest.created > cutoff:
                return
            del self._records[oldest_id]


def fingerprint_of(method: str, path: str, subject: str, body: bytes) -> str:
    """Hash what makes two writes "the same request"; JSON bodies are canonicalised first."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    except (ValueError, RecursionError):
        canonical = body
    digest = hashlib.sha256()
    for part in (method.encode(), path.encode(), subject.encode(), canonical):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def idempotent_write(
    store: IdempotencyStore,
    adapter: TypeAdapter[ArgsT],
    apply: Callable[[Caller, Mapping[str, Any], ArgsT], Outcome],
    *,
    after: Callable[[], None] | None = None,
) -> Endpoint:
    """Wrap a synchronous business write ``apply(caller, path_params, args)`` in the key contract above.

    ``after`` runs once the answer is remembered and before it is sent (a service saves its state
    there), so an answer the caller saw is never one a restart forgets.
    """

    async def endpoint(request: Request) -> Response:
        key = request.headers.get(KEY_HEADER, "").strip()
        if not key:
            return error(400, "missing_idempotency_key")
        caller = caller_of(request)
        body = await request.body()
        request_print = fingerprint_of(request.method, request.url.path, caller.subject, body)
        # From here to remember() there is no await: the check-then-apply is atomic on the event loop.
        record = store.get(caller.org, key)
        if record is not None:
            if record.fingerprint != request_print:
                return error(422, "idempotency_key_reused")
            return JSONResponse(dict(record.body), status_code=record.status_code, headers={REPLAYED_HEADER: "true"})
        args = parse_args(adapter, body)
        if args is None:
            return invalid_request()
        outcome = apply(caller, request.path_params, args)
        if outcome.status_code != 400:
            store.remember(org=caller.org, key=key, fingerprint=request_print, outcome=outcome)
            if after is not None:
                after()
        return JSONResponse(dict(outcome.body), status_code=outcome.status_code)

    return endpoint


def idempotency_lookup(store: IdempotencyStore) -> Endpoint:
    """``GET /idempotency/{key}``: what became of a write, for a caller that lost the answer."""

    async def endpoint(request: Request) -> Response:
        record = store.get(caller_of(request).org, request.path_params["key"])
        if record is None:
            return JSONResponse({"error": "not_found", "state": "unknown"}, status_code=404)
        return JSONResponse(
            {"key": record.key, "state": record.state, "status_code": record.status_code, "response": record.body}
        )

    return endpoint
