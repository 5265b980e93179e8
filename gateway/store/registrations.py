"""Registered manifests in Redis, and their pinning.

A service's registration is stored as *proposed*. Agents only ever see *pinned* definitions, and
only an admin pins (accepts) a proposal, naming the content hash they reviewed. So a new adapter,
or a changed definition (a "rug pull": same name, new description or schema), is quarantined
until accepted, while agents keep the pinned version. Every accept or removal bumps a version
counter that each gateway watches to rebuild its catalog without a restart.

Keys: ``countersign:registry:{<name>}:owner`` (the owning service's subject), ``:proposed`` and
``:pinned`` (JSON records), one hash tag per adapter; ``countersign:registry:names`` (set) and
``countersign:registry:version`` (counter).

A name is claimed atomically: one script, on the adapter's three keys (one hash tag, so one slot
on Redis Cluster), sets the owner if there is none and stores the proposal only for the owner. Of
any number of services registering a new name at once, exactly one owns it.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import redis.asyncio as aioredis

from gateway.canonical import canonical_json
from gateway.store.client import store_boundary

__all__ = ["Registration", "RegistrationState", "RegistryStore", "manifest_hash", "tool_hashes"]

RegistrationState = Literal["new", "active", "quarantined"]

_NAMES = "countersign:registry:names"
_VERSION = "countersign:registry:version"


def _key(name: str, which: str) -> str:
    return f"countersign:registry:{{{name}}}:{which}"


# KEYS: 1 owner, 2 proposed, 3 pinned (one adapter, one hash tag). ARGV: 1 the registering
# service, 2 its proposal record. Answers the owner; the proposal is stored only if that is ARGV[1].
_CLAIM_AND_PROPOSE = """
local owner = redis.call('GET', KEYS[1])
if not owner then
  -- Stored before names were claimed: the owner is the one its record names.
  for _, key in ipairs({KEYS[2], KEYS[3]}) do
    local raw = redis.call('GET', key)
    if raw and not owner then owner = cjson.decode(raw).owner end
  end
  owner = owner or ARGV[1]
  redis.call('SET', KEYS[1], owner)
end
if owner == ARGV[1] then redis.call('SET', KEYS[2], ARGV[2]) end
return owner
"""


def manifest_hash(manifest: Mapping[str, Any]) -> str:
    """Content hash of a whole manifest (what an admin accepts)."""
    return "sha256:" + hashlib.sha256(canonical_json(manifest).encode()).hexdigest()


def tool_hashes(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Content hash of each tool definition (name, description, schemas, mode, contract...)."""
    return {
        tool["name"]: "sha256:" + hashlib.sha256(canonical_json(tool).encode()).hexdigest()
        for tool in manifest.get("tools", ())
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class Registration:
    """An adapter's registry entry: what is pinned (served) and what is proposed (quarantined)."""

    name: str
    owner: str
    """Subject of the service key that registered it first; only it may propose changes."""
    pinned: Mapping[str, Any] | None = None
    pinned_hash: str | None = None
    accepted_by: str | None = None
    proposed: Mapping[str, Any] | None = None
    proposed_hash: str | None = None
    flags: Sequence[Mapping[str, str]] = field(default_factory=tuple)
    """Safety flags of the proposal, for the reviewing admin."""

    @property
    def state(self) -> RegistrationState:
        """``active`` (served, nothing pending), ``quarantined`` (a change awaits review) or ``new``."""
        if self.pinned is None:
            return "new"
        return "active" if self.proposed_hash in (None, self.pinned_hash) else "quarantined"

    def diff(self) -> dict[str, Any]:
        """What accepting the proposal would change, tool by tool, with a unified diff of each change."""
        before = {t["name"]: t for t in (self.pinned or {}).get("tools", ())}
        after = {t["name"]: t for t in (self.proposed or {}).get("tools", ())}
        changed = {}
        for name in sorted(before.keys() & after.keys()):
            if canonical_json(before[name]) != canonical_json(after[name]):
                old = json.dumps(before[name], indent=2, sort_keys=True).splitlines()
                new = json.dumps(after[name], indent=2, sort_keys=True).splitlines()
                changed[name] = "\n".join(difflib.unified_diff(old, new, "pinned", "proposed", lineterm=""))
        other = {k: v for k, v in (self.proposed or {}).items() if k != "tools"}
        pinned_other = {k: v for k, v in (self.pinned or {}).items() if k != "tools"}
        old_settings = json.dumps(pinned_other, indent=2, sort_keys=True).splitlines() if self.pinned else []
        new_settings = json.dumps(other, indent=2, sort_keys=True).splitlines()
        return {
            "added": sorted(after.keys() - before.keys()),
            "removed": sorted(before.keys() - after.keys()),
            "changed": changed,
            "settings_changed": other != pinned_other,
            "settings": "\n".join(difflib.unified_diff(old_settings, new_settings, "pinned", "proposed", lineterm=""))
            if other != pinned_other
            else "",
            "attention": [
                key for key in ATTENTION if self.pinned is not None and other.get(key) != pinned_other.get(key)
            ],
        }


ATTENTION = ("base_url", "credential", "signing_secret_env")
"""Settings whose change sends the gateway's credential, signed identities and approval receipts somewhere
else: an update changing one is called out first, and accepting it needs that change acknowledged by name."""


@store_boundary
class RegistryStore:
    """Reads and writes registrations. Validation happens before anything reaches it."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._claim = client.register_script(_CLAIM_AND_PROPOSE)

    async def get(self, name: str) -> Registration | None:
        raw: Any = await self._client.mget(_key(name, "owner"), _key(name, "proposed"), _key(name, "pinned"))
        claimed = raw[0].decode() if isinstance(raw[0], bytes) else raw[0]
        proposed, pinned = (json.loads(item) if item else None for item in raw[1:])
        either: Any = proposed or pinned
        if either is None:
            return None
        owner = claimed or either["owner"]
        return Registration(
            name=name,
            owner=owner,
            pinned=pinned["manifest"] if pinned else None,
            pinned_hash=pinned["hash"] if pinned else None,
            accepted_by=pinned.get("accepted_by") if pinned else None,
            proposed=proposed["manifest"] if proposed else None,
            proposed_hash=proposed["hash"] if proposed else None,
            flags=tuple(proposed.get("flags", ())) if proposed else (),
        )

    async def all(self) -> list[Registration]:
        names: Any = await self._client.smembers(_NAMES)
        found = [await self.get(n.decode() if isinstance(n, bytes) else n) for n in sorted(names)]
        return [registration for registration in found if registration is not None]

    async def propose(
        self, name: str, manifest: Mapping[str, Any], *, owner: str, flags: Sequence[Mapping[str, str]]
    ) -> Registration | None:
        """Store `manifest` as `owner`'s proposal for `name`, claiming the name if nobody owns it.

        None, and nothing stored, when another service owns `name`. (A proposal identical to the
        pinned manifest leaves the adapter active: see `Registration.state`.)
        """
        record = {"manifest": manifest, "hash": manifest_hash(manifest), "owner": owner, "flags": list(flags)}
        # Listed first, in its own slot: a listed name without a registration is skipped by `all`,
        # while a registration that is not listed would be missing from the review.
        await self._client.sadd(_NAMES, name)
        keys = [_key(name, "owner"), _key(name, "proposed"), _key(name, "pinned")]
        holder: Any = await self._claim(keys=keys, args=[owner, canonical_json(record)])
        if (holder.decode() if isinstance(holder, bytes) else holder) != owner:
            return None
        registration = await self.get(name)
        if registration is None:  # just written by the script
            raise RuntimeError(f"registration {name} vanished")
        return registration

    async def accept(self, name: str, *, expected_hash: str, admin: str) -> Registration | None:
        """Pin the proposal if it still has `expected_hash` (what the admin reviewed); None otherwise."""
        key = _key(name, "proposed")
        async with self._client.pipeline(transaction=True) as pipe:
            await pipe.watch(key)
            raw: Any = await pipe.get(key)
            proposal = json.loads(raw) if raw else None
            if proposal is None or proposal["hash"] != expected_hash:
                await pipe.unwatch()  # type: ignore[no-untyped-call]
                return None
            pinned = {**proposal, "accepted_by": admin}
            pipe.multi()  # type: ignore[no-untyped-call]
            pipe.set(_key(name, "pinned"), canonical_json(pinned))
            await pipe.execute()
        # The version is in a slot of its own, so it cannot join the name's transaction (a Cluster
        # refuses one across slots); bumped after the pin, a gateway that sees it finds the pin.
        await self._client.incr(_VERSION)
        return await self.get(name)

    async def remove(self, name: str) -> bool:
        # The name is freed with the registration: a service may claim it again (as a new adapter).
        # Three steps, each in one slot (a Cluster refuses a transaction across slots), in the order
        # that leaves nothing inconsistent if interrupted: a listed name without a registration is
        # skipped by `all`, and the version is bumped last so a gateway that sees it sees the removal.
        deleted: Any = await self._client.delete(_key(name, "owner"), _key(name, "proposed"), _key(name, "pinned"))
        await self._client.srem(_NAMES, name)
        await self._client.incr(_VERSION)
        return bool(deleted)

    async def version(self) -> int:
        value: Any = await self._client.get(_VERSION)
        return int(value or 0)

    async def pinned(self) -> dict[str, Mapping[str, Any]]:
        """Every pinned manifest, by adapter name: what agents are served."""
        return {r.name: r.pinned for r in await self.all() if r.pinned is not None}
