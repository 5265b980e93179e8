"""The live tool source: in-process adapters plus every pinned registered adapter, rebuilt on change.

Who uses it: the composition root builds one and hands it to the executor and the catalog as
their `ToolSource`. `refresh()` is cheap when nothing changed (one GET of the registry version);
when an admin accepts or removes an adapter, it builds the tools of the adapters whose pinned manifest
changed (the others' tools are kept: an adapter's tools follow from its name and its manifest alone,
and building those of a large one takes a while), opens a client for each new backend, and swaps in a
new `Toolbox` in one assignment, so every call sees one consistent set.
A pinned adapter that names a shared signing key (``signing_secret_env``) is served only when that key
is set in the gateway's secrets; one that names none gets identities signed with the gateway's own
keys (its JWKS): no registered backend ever receives a call whose identity it cannot verify.
Listeners (the MCP surface) are told, so clients can get ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
from pydantic import ValidationError

from gateway.errors import ToolDeclarationError
from gateway.outbound.backend_auth import (
    ApiKeyHeader,
    ApiKeyQuery,
    BackendAuth,
    BasicAuth,
    BearerToken,
    ClientCredentials,
)
from gateway.registry.manifest import AdapterManifest, CredentialSpec
from gateway.registry.tools import ManifestError, tools_from_manifest
from gateway.signing.identity import IdentityHeaders
from gateway.store.registrations import RegistryStore, manifest_hash
from gateway.tools.declarations import Tool
from gateway.tools.toolbox import Toolbox
from gateway.tools.upstream import UpstreamClient

__all__ = ["LiveToolSource"]

logger = logging.getLogger(__name__)

ClientFactory = Callable[[str, BackendAuth | None], UpstreamClient]
"""``(base_url, credential) -> client`` for a backend."""


def backend_auth(spec: CredentialSpec, secrets: Mapping[str, str]) -> BackendAuth | None:
    """The credential `spec` names, from the gateway's `secrets`; None when its secret is not set."""
    secret = secrets.get(spec.secret_env)
    if not secret:
        return None
    if spec.scheme == "header" and spec.name:
        return ApiKeyHeader(spec.name, secret)
    if spec.scheme == "query" and spec.name:
        return ApiKeyQuery(spec.name, secret)
    if spec.scheme == "basic" and spec.username_env:
        return BasicAuth(secrets.get(spec.username_env, ""), secret)
    if spec.scheme == "oauth2_client_credentials" and spec.token_url and spec.client_id_env:
        return ClientCredentials(spec.token_url, secrets.get(spec.client_id_env, ""), secret, scope=spec.scope)
    return BearerToken(secret)


def _fingerprint(spec: CredentialSpec | None, secrets: Mapping[str, str]) -> str:
    """Changes when any secret the credential names changes, so the client is rebuilt; holds no secret."""
    if spec is None:
        return ""
    values = "\0".join(secrets.get(variable, "") for variable in spec.references().values())
    return hashlib.sha256(values.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class _Built:
    """The tools of one pinned manifest, built once and kept while its content stays the same (the other input,
    the lease they are checked against, is this source's own and never changes)."""

    content: str
    """`manifest_hash` of the document they were built from."""
    manifest: AdapterManifest
    tools: Toolbox


class LiveToolSource:
    """A `ToolSource` whose tools follow the registry's pinned manifests."""

    def __init__(
        self,
        *,
        static: Sequence[Tool],
        store: RegistryStore,
        clients: MutableMapping[str, UpstreamClient],
        make_client: ClientFactory,
        secrets: Mapping[str, str],
        identity: IdentityHeaders,
        health_paths: MutableMapping[str, str],
        lease_seconds: float,
        health_intervals: MutableMapping[str, float] | None = None,
    ) -> None:
        self._static = tuple(static)
        self._lease_seconds = lease_seconds
        self._store = store
        self._clients = clients
        self._make_client = make_client
        self._secrets = secrets
        self._identity = identity
        self._health_paths = health_paths
        self._health_intervals = health_intervals if health_intervals is not None else {}
        self._box = Toolbox(self._static, lease_seconds=lease_seconds)
        self._version: int | None = None
        self._upstream: dict[str, tuple[Tool, ...]] = {}
        # How many upstream tool sets were served: a refresh whose build began at another count builds again.
        self._upstream_changes = 0
        self._remote: tuple[Tool, ...] = ()
        self._built: dict[str, _Built] = {}
        self._endpoints: dict[str, tuple[str, str, str]] = {}
        self._listeners: list[Callable[[], Awaitable[None]]] = []
        self._refreshing = anyio.Lock()

    def current(self) -> Toolbox:
        return self._box

    def on_change(self, listener: Callable[[], Awaitable[None]]) -> None:
        self._listeners.append(listener)

    async def serve_upstream(self, upstream: str, tools: Sequence[Tool]) -> None:
        """Serve `tools` as the reviewed tools of the MCP server `upstream` (replacing its earlier set).

        The caller has left out every name served already (`gateway.upstreams.tools`); a clash that slips
        through is refused by the `Toolbox` here and keeps the tools served before. It may land while a refresh
        builds its toolbox: that refresh then builds again with these tools (`_compose`).
        """
        before = self._upstream.get(upstream, ())
        self._upstream[upstream] = tuple(tools)
        try:
            # The other tools' schemas are taken as derived before: a large registered adapter's take a while.
            box = Toolbox(self._served(), lease_seconds=self._lease_seconds, reuse=(self._box,))
        except ToolDeclarationError as error:
            self._upstream[upstream] = before
            logger.error("upstream %s tools refused, keeping the served tools: %s", upstream, error)
            return
        self._box = box
        self._upstream_changes += 1
        for listener in self._listeners:
            await listener()

    def names_besides(self, upstream: str) -> frozenset[str]:
        """The names served now by anything but the MCP server `upstream`: names its tools may not take."""
        own = {tool.name for tool in self._upstream.get(upstream, ())}
        return frozenset(name for name in self._box if name not in own)

    def _served(self, remote: Sequence[Tool] | None = None) -> list[Tool]:
        """The in-process tools, the upstreams' and the registered adapters' (`remote`, or those served now)."""
        upstream = [tool for tools in self._upstream.values() for tool in tools]
        return [*self._static, *upstream, *(self._remote if remote is None else remote)]

    async def refresh(self) -> bool:
        """Rebuild from the pinned manifests if the registry changed. Returns whether tools changed.

        One refresh at a time: the poll and an accept's own refresh may overlap, and the one that read the
        registry first could otherwise swap its older tools in after the newer ones."""
        async with self._refreshing:
            return await self._refresh()

    def refresh_waiting(self) -> int:
        """How many refreshes wait for the one running to end (for tests and diagnostics)."""
        return self._refreshing.statistics().tasks_waiting

    async def _refresh(self) -> bool:
        version = await self._store.version()
        if version == self._version:
            return False
        # Building tools is CPU-bound (schemas to models, a large adapter takes a while): off the event loop, so
        # calls and /healthz are served meanwhile. The swap below happens on the loop, in one assignment.
        built = await anyio.to_thread.run_sync(self._build, dict(await self._store.pinned()), self._built)
        remote: list[Tool] = []
        for name, adapter in built.items():
            manifest = adapter.manifest
            # A named shared key must be set (its backend expects HS256); none named: the gateway's own keys.
            signing_key = self._secrets.get(manifest.signing_secret_env) if manifest.signing_secret_env else None
            if manifest.signing_secret_env and not signing_key:
                # Its backend could not verify who is asking; it gets no call at all rather than an
                # unsigned one.
                logger.error(
                    "pinned adapter %s cannot be served: its signing secret %s is not set on the gateway",
                    name,
                    manifest.signing_secret_env,
                )
                continue
            self._connect(name, manifest, signing_key)
            remote.extend(adapter.tools.values())
        try:
            box = await self._compose(remote, built.values())
        except ToolDeclarationError as error:
            logger.error("registry change refused, keeping the served tools: %s", error)
            return False
        changed = set(box) != set(self._box) or any(box.version(n) != self._box.version(n) for n in box)
        self._box, self._version, self._remote, self._built = box, version, tuple(remote), built
        if changed:
            logger.info("catalog now serves %d tools (registry version %d)", len(box), version)
            for listener in self._listeners:
                await listener()
        return changed

    async def _compose(self, remote: Sequence[Tool], built: Iterable[_Built]) -> Toolbox:
        """The toolbox of the in-process tools, `remote` and the upstreams' tools as served when it is returned.

        It is built in a worker thread, and `serve_upstream` may serve an upstream's new tools meanwhile (it
        does not wait for the refresh lock, under which listeners are called). A build that began before
        such a change is done again with it, so the toolbox returned, put in place before the next await, never
        leaves out an upstream's tools served in between.

        Raises:
            ToolDeclarationError: the tools cannot be served together (`Toolbox`).
        """
        built = tuple(built)
        while True:
            changes = self._upstream_changes
            served = self._served(remote)
            # The schemas of every tool built before are taken from where they were derived, not derived again.
            reuse = (self._box, *(adapter.tools for adapter in built))
            build = partial(Toolbox, served, lease_seconds=self._lease_seconds, reuse=reuse)
            box = await anyio.to_thread.run_sync(build)
            if changes == self._upstream_changes:
                return box

    def _build(self, pinned: Mapping[str, Any], before: Mapping[str, _Built]) -> dict[str, _Built]:
        """The tools of each pinned manifest that can be built (run in a worker thread): those built `before`
        from the same content are taken as they are, the others built now."""
        built: dict[str, _Built] = {}
        for name, document in pinned.items():
            content = manifest_hash(document)
            if (kept := before.get(name)) is not None and kept.content == content:
                built[name] = kept
                continue
            try:
                manifest = AdapterManifest.model_validate(document)
                tools = Toolbox(tools_from_manifest(name, manifest), lease_seconds=self._lease_seconds)
            except (ValidationError, ManifestError, ToolDeclarationError) as error:
                # Pinned manifests were validated when registered; this only guards against a
                # gateway upgrade that reads them differently, or a lease shortened since. The
                # adapter stays out, loudly.
                logger.error("pinned adapter %s cannot be served: %s", name, error)
                continue
            built[name] = _Built(content, manifest, tools)
        return built

    def _connect(self, name: str, manifest: AdapterManifest, signing_key: str | None) -> None:
        # The key first: by the time a call can reach the new client, it is signed for.
        self._identity.with_key(name, signing_key)
        credential = backend_auth(manifest.credential, self._secrets) if manifest.credential else None
        endpoint = (manifest.base_url, repr(credential), _fingerprint(manifest.credential, self._secrets))
        if self._endpoints.get(name) != endpoint:
            if (old := self._clients.get(name)) is not None:
                # Calls in flight may still hold it: it is kept, under a name no adapter has, and closed with
                # every client when the gateway stops (a reviewed base URL or credential change is rare).
                self._clients[f"{name}:retired:{len(self._clients)}"] = old
            self._clients[name] = self._make_client(manifest.base_url, credential)
            self._endpoints[name] = endpoint
        self._health_paths[name] = manifest.health_path
        self._health_intervals[name] = manifest.health_interval_seconds
