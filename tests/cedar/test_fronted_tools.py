"""``countersign policy explain`` on a fronted MCP server's tool (the real filesystem server, a real Redis): it
decides with the catalog the gateway serves, the fronted servers' reviewed tools included."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from gateway.cli.main import main
from gateway.config.settings import Settings
from gateway.principal import KeyKind
from gateway.runtime.upstreams import fronting
from gateway.store.keys import KeyStore
from tests.support.agents import make_key
from tests.support.mcp_servers import (
    NodeServer,
    files_upstream_config,
)
from tests.support.services import TEST_AUDIT_SECRET, in_process_gateway

pytestmark = pytest.mark.anyio

FILES = """
@id("staff-reads-notes")
permit (principal in Role::"staff", action == Action::"files_read_text_file", resource)
when { context.arguments.path like "*notes*" };
"""


@pytest.fixture(scope="module", name="redis_url")
def own_database(quiet_redis_url: str) -> str:
    return quiet_redis_url


async def test_explain_decides_a_fronted_servers_reviewed_tool_by_the_policy_that_names_it(
    filesystem_server: NodeServer, tmp_path: Path, redis: Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gateway lists the filesystem server and an admin accepts its ``read_text_file`` as a read for staff; then
    ``policy explain`` with a set naming ``files_read_text_file`` validates against that tool's real argument types
    and names the policy that allows a path it matches, and none for a path it does not."""
    config = tmp_path / "countersign.toml"
    config.write_text(files_upstream_config(filesystem_server, tmp_path, ("staff", "approver")))
    policies = tmp_path / "files.cedar"
    policies.write_text(FILES)
    environ = {"COUNTERSIGN_REDIS_URL": redis_url, "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}
    settings = Settings.load(environ, config)
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry",))
    _token, staff = await KeyStore(redis).create(
        kind=KeyKind.AGENT, subject="sam@acme.example", org="acme", roles=("staff",)
    )

    async def cli(*args: str) -> tuple[int, str, str]:
        every = {**environ, "COUNTERSIGN_ADMIN_KEY": admin}
        status = await anyio.to_thread.run_sync(lambda: main(["--config", str(config), *args], every))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    async with in_process_gateway(settings, []) as gateway:
        async with fronting(
            settings.upstreams, gateway.live, reviews=gateway.upstream_reviews, secrets={}, poll_seconds=0.2
        ):
            with anyio.fail_after(20):
                while "read_text_file" not in (review := (await cli("upstreams", "review"))[1]):
                    await anyio.sleep(0.1)
            [line] = [line for line in review.splitlines() if line.startswith("  read_text_file  ")]
            status, _, err = await cli(
                "upstreams", "accept", "files", "read_text_file", "--hash", line.split("listed=")[1],
                "--mode", "read", "--role", "staff",
            )  # fmt: skip
            assert status == 0, err
            with anyio.fail_after(20):
                while "files_read_text_file" not in gateway.live.current():
                    await anyio.sleep(0.1)

    explain = ["policy", "explain", "--key", staff.key_id, "--tool", "files_read_text_file"]
    explain += ["--policies", str(policies)]
    status, out, err = await cli(*explain, "--args", json.dumps({"path": f"{tmp_path}/notes.txt"}))
    assert status == 0, err
    assert f"policy set: {policies}@sha256:" in out and "listed: yes" in out
    assert "\nallow\ndeciding policies: staff-reads-notes\n" in out
    status, out, err = await cli(*explain, "--args", json.dumps({"path": f"{tmp_path}/secrets.txt"}))
    assert status == 0, err
    assert "\ndeny\ndeciding policies: none (no policy permits it)\n" in out
    # The argument's type is the server's own: a policy reading it as a number is refused with Cedar's message.
    policies.write_text(FILES.replace('like "*notes*"', "> 3"))
    status, _, err = await cli(*explain, "--args", json.dumps({"path": f"{tmp_path}/notes.txt"}))
    assert status == 1 and "staff-reads-notes" in err and "does not validate" in err
