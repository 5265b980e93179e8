"""Which Redis deployment the gateway talks to, read from a URL: a single node, Sentinel or Cluster.

`parse_redis_url` is the only reader of the URL's scheme; `gateway.store.client.connect` builds the
client for the `RedisTarget` it returns, and `redis_url_of` writes the URL the TOML settings
(`redis_sentinels`, `redis_cluster_nodes`, ...) describe, so the file and ``COUNTERSIGN_REDIS_URL``
end in the same place. The schemes:

* ``redis://[user:password@]host:port/db`` and ``rediss://`` (TLS), and ``unix://``: one node,
  handed to redis-py's ``from_url`` whole (its query options included);
* ``redis+sentinel://[user:password@]host:port,host:port/master[/db]`` (``rediss+sentinel`` for
  TLS): the master the sentinels name, found again after a failover; the credentials are the
  master's (sentinels are asked without them);
* ``redis+cluster://[user:password@]host:port,host:port`` (``rediss+cluster``): a Redis Cluster,
  discovered from any of those nodes.

No I/O here: this is vocabulary.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from gateway.errors import ConfigError

__all__ = ["RedisKind", "RedisTarget", "parse_redis_url", "redis_url_of"]


class RedisKind(enum.Enum):
    SINGLE = "single"
    SENTINEL = "sentinel"
    CLUSTER = "cluster"


@dataclass(frozen=True, kw_only=True, slots=True)
class RedisTarget:
    kind: RedisKind
    url: str
    """The URL as given (for a single node, what redis-py's ``from_url`` reads)."""
    nodes: tuple[tuple[str, int], ...] = ()
    """The sentinels, or the cluster's seed nodes; empty for a single node."""
    master: str | None = None
    """The Sentinel master's name."""
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False

    def __repr__(self) -> str:
        # The URL and the password may carry a secret: show the shape only.
        return f"RedisTarget(kind={self.kind.value}, nodes={list(self.nodes)}, master={self.master!r}, tls={self.tls})"


_SCHEMES = {
    "redis+sentinel": (RedisKind.SENTINEL, False),
    "rediss+sentinel": (RedisKind.SENTINEL, True),
    "redis+cluster": (RedisKind.CLUSTER, False),
    "rediss+cluster": (RedisKind.CLUSTER, True),
}


def parse_redis_url(url: str) -> RedisTarget:
    """The deployment `url` names.

    Raises:
        ConfigError: an unknown scheme, a node without a valid port, a Sentinel URL without a
            master name, or a Cluster URL with a database other than 0 (Cluster has only db 0).
    """
    scheme, _, rest = url.partition("://")
    if not rest:
        raise ConfigError("a Redis URL reads scheme://..., e.g. redis://host:6379/0")
    if scheme in ("redis", "rediss", "unix"):
        return RedisTarget(kind=RedisKind.SINGLE, url=url, tls=scheme == "rediss")
    if scheme not in _SCHEMES:
        raise ConfigError(f"unknown Redis URL scheme {scheme!r} (redis, rediss, unix, redis+sentinel, redis+cluster)")
    kind, tls = _SCHEMES[scheme]
    # urlsplit rejects a netloc of several host:port pairs, so the credentials and hosts are split by hand.
    netloc, _, path = rest.partition("/")
    path = urlsplit("x://h/" + path).path.strip("/")
    credentials, _, hosts = netloc.rpartition("@")
    username, _, password = credentials.partition(":") if credentials else ("", "", "")
    nodes = tuple(_node(item) for item in hosts.split(",") if item)
    if not nodes:
        raise ConfigError(f"a {scheme} URL names at least one host:port")
    parts = [part for part in path.split("/") if part]
    master: str | None = None
    if kind is RedisKind.SENTINEL:
        if not parts:
            raise ConfigError("a redis+sentinel URL names its master: redis+sentinel://host:port,host:port/mymaster")
        master, parts = unquote(parts[0]), parts[1:]
    if len(parts) > 1 or (parts and not parts[0].isdigit()):
        raise ConfigError(f"the database of a {scheme} URL is one number")
    db = int(parts[0]) if parts else 0
    if kind is RedisKind.CLUSTER and db != 0:
        raise ConfigError("a Redis Cluster has only database 0")
    return RedisTarget(
        kind=kind,
        url=url,
        nodes=nodes,
        master=master,
        db=db,
        tls=tls,
        username=unquote(username) or None,
        password=unquote(password) or None,
    )


def redis_url_of(
    *,
    sentinels: list[str] | None,
    master: str | None,
    cluster_nodes: list[str] | None,
    username: str | None,
    password: str | None,
    tls: bool,
) -> str | None:
    """The URL of the TOML settings' deployment: None when they name neither Sentinel nor Cluster.

    Raises:
        ConfigError: both are named, or Sentinel without its master name (or the reverse).
    """
    if sentinels and cluster_nodes:
        raise ConfigError("gateway.redis_sentinels and gateway.redis_cluster_nodes exclude each other")
    if bool(sentinels) != bool(master) and not cluster_nodes:
        raise ConfigError("gateway.redis_sentinels and gateway.redis_master_name go together")
    if not sentinels and not cluster_nodes:
        return None
    kind = "sentinel" if sentinels else "cluster"
    scheme = f"{'rediss' if tls else 'redis'}+{kind}"
    auth = ""
    if username or password:
        auth = f"{quote(username or '', safe='')}:{quote(password or '', safe='')}@"
    hosts = ",".join(sentinels or cluster_nodes or [])
    path = f"/{quote(master or '', safe='')}" if sentinels else ""
    url = f"{scheme}://{auth}{hosts}{path}"
    parse_redis_url(url)  # the same checks as a URL given whole
    return url


def _node(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"a Redis node reads host:port, not {text!r}")
    return host.strip("[]"), int(port)
