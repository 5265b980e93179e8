"""Every store command of `countersign`, on the topologies past one node the README lists.

The URLs are the ones an operator writes: ``redis+cluster://`` with every seed node, and
``redis+sentinel://`` with every sentinel. Real servers throughout (`tests.support.redis_topologies`):
a three-master Cluster and a Sentinel group of one master, one replica and three sentinels.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gateway.cli.main import main
from tests.support.redis_topologies import redis_cluster, sentinel_group
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["cluster", "sentinel"])
def store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A Cluster's or a Sentinel group's URL, listing several hosts."""
    if request.param == "cluster":
        with redis_cluster(masters=3) as url:
            yield url
    else:
        with sentinel_group() as group:
            yield group.url


def _run(url: str, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    environ = {"COUNTERSIGN_REDIS_URL": url, "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}
    status = main(list(argv), environ)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_keys_create_list_and_revoke_work_on_a_url_of_several_hosts(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first key of a Cluster or Sentinel deployment is made with the CLI, listed, revoked and audited;
    the store line names every host and no credential."""
    status, out, err = _run(store_url, capsys, "keys", "create", "--kind", "admin", "--subject",
                            "ops@acme.example", "--org", "acme", "--json")  # fmt: skip
    assert status == 0, err
    assert err.splitlines()[0] == f"countersign: using Redis {store_url}"
    created = json.loads(out)
    assert created["kind"] == "admin" and created["org"] == "acme"
    status, out, err = _run(store_url, capsys, "keys", "list")
    assert status == 0, err
    assert created["key_id"] in out and "ops@acme.example" in out and created["key"] not in out
    status, _, err = _run(store_url, capsys, "keys", "revoke", created["key_id"])
    assert status == 0, err
    status, out, _ = _run(store_url, capsys, "keys", "list")
    assert "revoked" in out
    status, out, err = _run(store_url, capsys, "audit", "tail", "-n", "10", "--json")
    assert status == 0, err
    actions = [json.loads(line)["action"] for line in out.splitlines()]
    assert "key.create" in actions and "key.revoke" in actions


def test_signing_keys_rotate_and_list_work_on_a_url_of_several_hosts(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`signing-keys rotate` makes the deployment's key (and the next) and `list` shows both."""
    status, first, err = _run(store_url, capsys, "signing-keys", "rotate")
    assert status == 0, err
    status, second, err = _run(store_url, capsys, "signing-keys", "rotate")
    assert status == 0, err
    status, out, err = _run(store_url, capsys, "signing-keys", "list")
    assert status == 0, err
    listed = dict(line.split("  ", 1) for line in out.splitlines())
    assert listed[second.strip()].startswith("EdDSA  active")
    assert listed[first.strip()].startswith("EdDSA  retires ")
