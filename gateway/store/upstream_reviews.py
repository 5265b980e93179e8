"""Reviews of fronted MCP servers' tools made through the gateway, and what each server lists now, in Redis.

An upstream's tools are served only as a person reviewed them (`gateway.upstreams.review`). Reviews come
from the config file or, stored here, from an admin with the ``registry`` role through the admin API, the
CLI or the console (`gateway.upstreams.tool_reviews`). Each stored review keeps the definition the admin
read, so a later change is shown as a diff of exactly that. Every gateway process that fronts the server
writes what it last listed (with which tools it holds back and why), so the review reads the upstream as
served, and each watches a version counter to serve a new review without a restart.

Keys (one hash tag per upstream, so each write touches one slot on a Redis Cluster):
``countersign:upstreams:{<name>}:reviews`` (hash: tool -> JSON record), ``:seen`` (hash: tool -> the last
definition served as reviewed, for the diff of a change to a tool reviewed in the config file),
``:listed`` (JSON record); ``countersign:upstreams:version`` (counter, its own slot, bumped after a review).

Services may also register an HTTP upstream of their own through the registry API: ``countersign:upstreams:owners``
(hash: name -> the service that claimed it first, set with HSETNX so exactly one owns it),
``countersign:upstreams:registered`` (hash: name -> the section as JSON, with no review in it: what is fronted) and
``countersign:upstreams:proposed`` (hash: name -> a section registered again with another server or credential,
held until a registry admin accepts it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from gateway.canonical import canonical_json
from gateway.store.client import store_boundary

__all__ = ["Listing", "StoredReview", "UpstreamReviewStore"]

_VERSION = "countersign:upstreams:version"
_OWNERS = "countersign:upstreams:owners"
_REGISTERED = "countersign:upstreams:registered"
_PROPOSED = "countersign:upstreams:proposed"
_DROP_IF_SAME = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
"""


def _key(upstream: str, which: str) -> str:
    return f"countersign:upstreams:{{{upstream}}}:{which}"


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredReview:
    """An admin's review of one upstream tool, as stored."""

    review: Mapping[str, Any]
    """The review (`gateway.config.upstreams.ToolReview` as JSON), with the hash it pins."""
    reviewed: Mapping[str, Any]
    """The definition the admin read when accepting (its hash is the pinned one)."""
    by: str
    at_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Listing:
    """What a gateway read from the upstream last, and what it held back."""

    tools: Sequence[Mapping[str, Any]]
    held: Mapping[str, str]
    """Tool name -> why it is not served (``unreviewed``, ``changed``, ``hidden``, ``shadows``, ``unusable: ...``)."""
    protocol: str
    at_ms: int


@store_boundary
class UpstreamReviewStore:
    """Reads and writes upstream reviews and listings. Who may review is decided before anything reaches it."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._drop_if_same = client.register_script(_DROP_IF_SAME)

    async def reviews(self, upstream: str) -> dict[str, StoredReview]:
        raw: Any = await self._client.hgetall(_key(upstream, "reviews"))
        found: dict[str, StoredReview] = {}
        for tool, record in raw.items():
            value = json.loads(record)
            found[_text(tool)] = StoredReview(
                review=value["review"], reviewed=value["reviewed"], by=value["by"], at_ms=int(value["at_ms"])
            )
        return found

    async def store_review(
        self, upstream: str, tool: str, *, review: Mapping[str, Any], reviewed: Mapping[str, Any], by: str, at_ms: int
    ) -> None:
        """Store (or replace) the review of `tool`; every gateway fronting `upstream` serves by it next."""
        record = {"review": review, "reviewed": reviewed, "by": by, "at_ms": at_ms}
        await self._client.hset(_key(upstream, "reviews"), tool, canonical_json(record))
        # In a slot of its own, so bumped after the write: a gateway that sees the new version finds the review.
        await self._client.incr(_VERSION)

    async def version(self) -> int:
        value: Any = await self._client.get(_VERSION)
        return int(value or 0)

    async def record_listing(self, upstream: str, listing: Listing) -> None:
        record = {"tools": list(listing.tools), "held": dict(listing.held), "protocol": listing.protocol}
        await self._client.set(_key(upstream, "listed"), canonical_json({**record, "at_ms": listing.at_ms}))

    async def listing(self, upstream: str) -> Listing | None:
        raw: Any = await self._client.get(_key(upstream, "listed"))
        if not raw:
            return None
        value = json.loads(raw)
        return Listing(tools=value["tools"], held=value["held"], protocol=value["protocol"], at_ms=value["at_ms"])

    async def record_seen(self, upstream: str, served: Mapping[str, Mapping[str, Any]]) -> None:
        """Remember the definitions served as reviewed, so a later change can be shown as a diff."""
        if served:
            await self._client.hset(
                _key(upstream, "seen"), mapping={tool: canonical_json(d) for tool, d in served.items()}
            )

    async def seen(self, upstream: str) -> dict[str, Mapping[str, Any]]:
        raw: Any = await self._client.hgetall(_key(upstream, "seen"))
        return {_text(tool): json.loads(definition) for tool, definition in raw.items()}

    async def register(self, upstream: str, section: Mapping[str, Any], *, owner: str, hold: bool = False) -> str:
        """Store `section` for `upstream` if `owner` owns the name (claiming it if nobody does); the owner. With
        `hold`, the section is proposed (`proposed`) and the one registered before stays fronted; without, it is
        fronted and any proposal is dropped."""
        await self._client.hsetnx(_OWNERS, upstream, owner)
        holder = _text(await self._client.hget(_OWNERS, upstream))
        if holder == owner:
            if hold:
                await self._client.hset(_PROPOSED, upstream, canonical_json(section))
            else:
                await self._client.hset(_REGISTERED, upstream, canonical_json(section))
                await self._client.hdel(_PROPOSED, upstream)
            await self._client.incr(_VERSION)
        return holder

    async def registered(self) -> dict[str, Mapping[str, Any]]:
        """Every upstream services registered, by name: its section as stored."""
        raw: Any = await self._client.hgetall(_REGISTERED)
        return {_text(name): json.loads(section) for name, section in raw.items()}

    async def proposed(self, upstream: str) -> Mapping[str, Any] | None:
        """The section `upstream` was registered again with, held for a registry admin; None when none is."""
        raw: Any = await self._client.hget(_PROPOSED, upstream)
        return json.loads(raw) if raw else None

    async def adopt(self, upstream: str, section: Mapping[str, Any]) -> None:
        """Front `section` (the proposal a registry admin accepted) for `upstream`. The proposal is dropped only if
        it is still that one: one the service made since stays proposed."""
        text = canonical_json(section)
        await self._client.hset(_REGISTERED, upstream, text)
        await self._drop_if_same(keys=[_PROPOSED], args=[upstream, text])
        await self._client.incr(_VERSION)
