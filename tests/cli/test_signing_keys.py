"""`countersign signing-keys rotate|list`, as an operator runs them against a production Redis."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from redis import Redis

from gateway.cli.main import main
from tests.support.services import TEST_AUDIT_SECRET


@pytest.fixture
def store_url(redis_server_url: str) -> Iterator[str]:
    """An empty database of the session's server, as a production Redis before its first key."""
    url = urlunsplit(urlsplit(redis_server_url)._replace(path="/12"))
    with Redis.from_url(url) as client:
        client.flushdb()
        yield url
        client.flushdb()


def test_the_first_rotate_makes_the_first_key_and_the_next_keeps_the_old_one_published(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Production starts with no key; `rotate` makes one (its kid on stdout, no key material anywhere), `list`
    shows it active; a second `rotate` makes another active while the first retires later; both are audited."""
    environ = {"COUNTERSIGN_REDIS_URL": store_url, "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}
    assert main(["signing-keys", "list"], environ) == 0
    assert "no signing key" in capsys.readouterr().err
    assert main(["signing-keys", "rotate"], environ) == 0
    first = capsys.readouterr().out.strip()
    assert first.startswith("cs-") and len(first) == 19
    assert main(["signing-keys", "rotate"], environ) == 0
    rotated = capsys.readouterr()
    second = rotated.out.strip()
    assert second != first and f"{first} stays published for" in rotated.err
    assert main(["signing-keys", "list"], environ) == 0
    listed = dict(line.split("  ", 1) for line in capsys.readouterr().out.splitlines())
    assert listed[second].startswith("EdDSA  active") and listed[first].startswith("EdDSA  retires ")
    assert main(["audit", "tail", "-n", "5"], environ) == 0
    assert capsys.readouterr().out.count("signing_key.rotate") == 2


def test_another_secret_cannot_read_the_keys(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A process with another audit secret is refused with the reason, and changes nothing."""
    environ = {"COUNTERSIGN_REDIS_URL": store_url, "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}
    assert main(["signing-keys", "rotate"], environ) == 0
    capsys.readouterr()
    other = {**environ, "COUNTERSIGN_AUDIT_SECRET": "another-audit-secret-0123456789abcdef"}
    assert main(["signing-keys", "rotate"], other) == 1
    assert "does not decrypt" in capsys.readouterr().err
