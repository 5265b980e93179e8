"""`countersign upstreams ...` against a real Redis and the real filesystem server: the review lists what a
gateway read (quarantined, with the upstream's hints as suggestions), and accept stores a review by hash."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from gateway.cli.main import main
from gateway.config.settings import Settings
from gateway.principal import KeyKind
from gateway.runtime.upstreams import fronting
from gateway.store.upstream_reviews import UpstreamReviewStore
from tests.support.agents import make_key
from tests.support.mcp_servers import (
    NodeServer,
    files_upstream_config,
)
from tests.support.services import TEST_AUDIT_SECRET, in_process_gateway

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", name="redis_url")
def own_database(quiet_redis_url: str) -> str:
    return quiet_redis_url


async def test_review_and_accept_an_upstream_tool_from_the_cli(
    filesystem_server: NodeServer, tmp_path: Path, redis: Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gateway reads the server's list; the CLI shows each tool quarantined with its suggestion and hash, refuses
    a review naming another hash, and stores one naming the listed hash, which the gateway then serves."""
    config = tmp_path / "countersign.toml"
    config.write_text(files_upstream_config(filesystem_server, tmp_path, ("staff", "approver")))
    environ = {"COUNTERSIGN_REDIS_URL": redis_url, "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}
    settings = Settings.load(environ, config)
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))

    async def cli(*args: str) -> tuple[int, str, str]:
        every = {**environ, "COUNTERSIGN_ADMIN_KEY": admin}
        status = await anyio.to_thread.run_sync(lambda: main(["--config", str(config), *args], every))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    async with in_process_gateway(settings, []) as gateway:
        async with fronting(
            settings.upstreams, gateway.live, reviews=gateway.upstream_reviews, secrets={}, poll_seconds=0.2
        ):
            status, out, _ = await cli("upstreams", "review")
            assert status == 0 and out.startswith("files  stdio  protocol=")
            [line] = [line for line in out.splitlines() if line.startswith("  write_file  ")]
            assert "quarantined (unreviewed)" in line
            listed = line.split("listed=")[1]
            assert '"destructiveHint": true' in out and "suggested by the upstream (not trusted)" in out
            status, _, err = await cli(
                "upstreams", "accept", "files", "write_file", "--hash", "sha256:" + "0" * 64, "--mode", "write",
                "--role", "staff",
            )  # fmt: skip
            assert status == 1 and "CONFLICT" in err
            status, out, _ = await cli(
                "upstreams", "accept", "files", "write_file", "--hash", listed, "--mode", "write", "--role", "staff",
                "--preview", '{"tool": "read_text_file", "arguments": {"path": "path"}, "compare": "content"}',
            )  # fmt: skip
            assert status == 0 and out.startswith("OK: write_file reviewed write")
            listed_now = _hash((await cli("upstreams", "review"))[1], "write_file")
            assert listed_now == listed
            # Its preview names a read nobody reviewed yet: held back as unusable, never run as a write's preview.
            with anyio.fail_after(20):
                while "unusable" not in (review := (await cli("upstreams", "review"))[1]):
                    await anyio.sleep(0.1)
            status, out, _ = await cli(
                "upstreams", "accept", "files", "read_text_file", "--hash", _hash(review, "read_text_file"),
                "--mode", "read", "--role", "staff",
            )  # fmt: skip
            assert status == 0
            with anyio.fail_after(20):
                while "files_write_file" not in gateway.live.current():
                    await anyio.sleep(0.1)
            assert "files_read_text_file" in gateway.live.current()


def _hash(review: str, tool: str) -> str:
    [line] = [line for line in review.splitlines() if line.startswith(f"  {tool}  ")]
    return line.split("listed=")[1]


async def test_a_server_registered_again_elsewhere_is_accepted_from_the_cli(
    tmp_path: Path, redis: Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A service registered its server, then registered it again at another URL: review shows the new URL and what
    it changes; accept-registration refuses it unacknowledged and fronts it acknowledged."""
    config = tmp_path / "countersign.toml"
    config.write_text('[orgs.acme]\nadapters = ["gitsvc"]\nroles = ["staff"]\n')
    environ = {"COUNTERSIGN_REDIS_URL": redis_url, "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    store = UpstreamReviewStore(redis)
    before = {"transport": "http", "url": "http://127.0.0.1:8001/mcp"}
    await store.register("gitsvc", before, owner="git-team")
    await store.register("gitsvc", {**before, "url": "http://127.0.0.1:8002/mcp"}, owner="git-team", hold=True)

    async def cli(*args: str) -> tuple[int, str, str]:
        every = {**environ, "COUNTERSIGN_ADMIN_KEY": admin}
        status = await anyio.to_thread.run_sync(lambda: main(["--config", str(config), *args], every))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    status, out, _ = await cli("upstreams", "review")
    assert status == 0 and "  registered again: url=http://127.0.0.1:8002/mcp  changes url" in out
    proposed = out.split("proposed=", 1)[1].split()[0]
    status, _, err = await cli("upstreams", "accept-registration", "gitsvc", "--hash", proposed)
    assert status == 1 and "VALIDATION_ERROR" in err
    assert (await store.registered())["gitsvc"]["url"] == "http://127.0.0.1:8001/mcp"
    status, out, _ = await cli("upstreams", "accept-registration", "gitsvc", "--hash", proposed, "--acknowledge", "url")
    assert status == 0 and out.startswith("OK: gitsvc is fronted as registered now")
    assert (await store.registered())["gitsvc"]["url"] == "http://127.0.0.1:8002/mcp"
    assert await store.proposed("gitsvc") is None
