"""Where a manifest points the gateway: the egress rule for a registered adapter's base URL. Pure functions.

:func:`check_base_url` is the egress rule for the URL the gateway will call, so a manifest cannot aim
it at its own network. What a manifest says to the model is reviewed by `policies.text_safety`, with
the same detectors that flag an agent's words on an approval card. No I/O and no DNS.
"""

from __future__ import annotations

import ipaddress
import re
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

__all__ = ["check_base_url"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_NAME = re.compile(r"(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")
_METADATA_NAMES = frozenset({"metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"})
_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200", "192.0.0.192")
)
_EMBEDDING_IPV4 = tuple(
    ipaddress.ip_network(n)
    for n in (
        "64:ff9b::/96",  # NAT64, well-known prefix (RFC 6052)
        "64:ff9b:1::/48",  # NAT64, local use (RFC 8215): the IPv4 address is the last 32 bits
        "::ffff:0:0:0/96",  # IPv4-translated (RFC 2765)
        "::/96",  # IPv4-compatible (deprecated, RFC 4291), which a dual stack may still route
    )
)
"""IPv6 prefixes whose last 32 bits name an IPv4 host that a translator or a dual stack may reach."""
_RESERVED_IPV4 = ipaddress.ip_network("192.0.0.0/24")
"""IETF protocol assignments (RFC 6890): not global, though Python's `is_global` says so for most of it."""

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_base_url(url: str, *, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """Problems with ``url`` as an adapter's base URL; empty means the gateway may call it.

    ``allowed`` holds the operator's ``scheme://host:port`` patterns, matched part by part with
    :func:`fnmatch.fnmatchcase` (``https://*.internal.example:*``, ``http://[::1]:8080``; no port means the
    scheme's default). An empty allowlist allows nothing. Loopback and ``localhost``, link-local, cloud
    metadata, unspecified, private and other non-global addresses and multicast pass only when a matching
    entry names that exact host: ``http://127.0.0.1:*`` allows a demo, ``http://*:*`` does not open
    loopback. Credentials, query, fragment, other schemes, non-ASCII hosts and numeric hosts in
    non-standard forms (``2130706433``, ``127.1``) are refused.
    """
    if any(char.isspace() or not char.isprintable() for char in url):
        return ("base URL contains whitespace or control characters",)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return ("base URL cannot be parsed (host or port)",)
    scheme = parts.scheme
    problems: list[str] = []
    if scheme not in _DEFAULT_PORTS:
        problems.append(f"scheme must be http or https, not {scheme!r}")
    if parts.username is not None or parts.password is not None:
        problems.append("base URL must not carry credentials (user:pass@); use credential.secret_env")
    if "?" in url:
        problems.append("base URL must not have a query string")
    if "#" in url:
        problems.append("base URL must not have a fragment")
    host = (parts.hostname or "").rstrip(".")
    address = _address(host)
    if not host:
        problems.append("base URL has no host")
    elif address is None and not _HOST_NAME.fullmatch(host):
        problems.append(f"host {host!r} is not an IP address or an ASCII host name (use punycode)")
    elif address is None and _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]):
        problems.append(f"host {host!r} is a numeric address in a non-standard form")
    if problems:
        return tuple(problems)
    port = _DEFAULT_PORTS[scheme] if port is None else port
    shown = f"[{host}]" if address is not None and address.version == 6 else host
    matches = {_match(pattern, scheme, host, address, port) for pattern in allowed} - {None}
    if not matches:
        problems.append(f"{scheme}://{shown}:{port} matches no entry of the allowlist")
    risk = _risk(host, address)
    if risk is not None and "exact" not in matches:
        problems.append(f"host {shown} is {risk}; it is allowed only by an allowlist entry naming it exactly")
    return tuple(problems)


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return None


def _split_pattern(pattern: str) -> tuple[str, str, str] | None:
    scheme, sep, rest = pattern.strip().lower().partition("://")
    rest = rest.rstrip("/")
    if not sep or not rest:
        return None
    if rest.startswith("["):
        host, bracket, after = rest[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            return None
        port = after[1:]
    else:
        host, _, port = rest.partition(":")
    return scheme, host.rstrip("."), port or str(_DEFAULT_PORTS.get(scheme, ""))


def _match(pattern: str, scheme: str, host: str, address: Address | None, port: int) -> str | None:
    """``"exact"`` when the entry names this very host, ``"wildcard"`` when its pattern covers it, else None."""
    parts = _split_pattern(pattern)
    if parts is None or not (fnmatchcase(scheme, parts[0]) and fnmatchcase(str(port), parts[2])):
        return None
    if parts[1] == host or (address is not None and _address(parts[1]) == address):
        return "exact"
    return "wildcard" if fnmatchcase(host if address is None else str(address), parts[1]) else None


def _risk(host: str, address: Address | None) -> str | None:
    if address is None:
        if host == "localhost" or host.endswith(".localhost"):
            return "loopback"
        return "a cloud metadata host" if host in _METADATA_NAMES else None
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and any(address in prefix for prefix in _EMBEDDING_IPV4) and int(address) > 1:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None and (inner := _risk(str(embedded), embedded)) is not None:
            return f"{inner} (embedded IPv4)"
    kinds = (
        ("a cloud metadata address", address in _METADATA_ADDRESSES),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("unspecified", address.is_unspecified),
        ("multicast", address.is_multicast),
        ("a private or reserved address", not address.is_global or address in _RESERVED_IPV4),
    )
    return next((kind for kind, hit in kinds if hit), None)
