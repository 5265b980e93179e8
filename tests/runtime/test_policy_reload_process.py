"""``countersign serve`` with a Cedar policy set, as an operator runs it: SIGHUP puts the set in force again."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.cedar.test_engine import EXAMPLE
from tests.support.mcp_servers import files_upstream_config, install_filesystem_server, installed_or_skipped
from tests.support.processes import READY, clean_environ, serve
from tests.support.redis_server import free_port
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.slow

IN_FORCE = "policy set "


def _readyz(port: int) -> dict[str, str]:
    policies: dict[str, str] = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json()["policies"]
    return policies


def _until(condition: str, check: object, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not callable(check) or not check():
        assert time.monotonic() < deadline, f"not {condition} within {timeout} s"
        time.sleep(0.1)


def test_sighup_reloads_the_policy_set_and_the_process_keeps_serving(tmp_path: Path) -> None:
    """SIGHUP (which would end a process without a handler) loads the files again even unchanged, logs the set
    in force, and /readyz shows it; an edited set shown after a SIGHUP is the new one, and a refused one leaves
    the set in force named, with the reason."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "refunds.cedar").write_text(EXAMPLE)
    port = free_port()
    environ = clean_environ(COUNTERSIGN_POLICIES=str(policies))
    with serve(tmp_path, "serve", "--port", str(port), environ=environ) as process:
        process.wait_for(READY)
        first = _readyz(port)["active"]
        assert first.startswith(f"{policies}@sha256:")
        loaded = process.output().count(f"{first} in force")
        process.process.send_signal(signal.SIGHUP)
        _until("reloaded on SIGHUP", lambda: process.output().count(f"{first} in force") > loaded)
        assert process.process.poll() is None and _readyz(port) == {"active": first}

        (policies / "more.cedar").write_text(
            '@id("support-reads") permit (principal in Role::"support", action, resource);'
        )
        process.process.send_signal(signal.SIGHUP)
        _until("the edited set in force", lambda: _readyz(port)["active"] != first)
        second = _readyz(port)["active"]

        (policies / "typo.cedar").write_text(
            '@id("typo") forbid (principal, action == Action::"orders_refund_create", resource)\n'
            'when { context.arguments.amount_cents > "500" };'
        )
        process.process.send_signal(signal.SIGHUP)
        _until("the typo refused", lambda: "refused" in _readyz(port))
        status = _readyz(port)
        assert status["active"] == second and "typo" in status["refused"]
        assert process.process.poll() is None
        code, _seconds = process.stop()
    assert code == 0, process.output()
    assert "Traceback" not in process.output()


def test_a_policy_set_that_does_not_validate_stops_serve_with_cedars_message(tmp_path: Path) -> None:
    """A wrong argument type at start: one ``countersign:`` line naming the policy and the type Cedar expected,
    exit 1, no traceback, and nothing served."""
    policies = tmp_path / "bad.cedar"
    policies.write_text(
        '@id("typo") forbid (principal, action == Action::"orders_refund_create", resource)\n'
        'when { context.arguments.amount_cents > "500" };'
    )
    environ = clean_environ(COUNTERSIGN_POLICIES=str(policies))
    with serve(tmp_path, "serve", "--port", str(free_port()), environ=environ) as process:
        status = process.process.wait(timeout=30)
    output = process.output()
    errors = [line for line in output.splitlines() if line.startswith("countersign:")]
    assert status == 1 and len(errors) == 1, output
    assert "typo" in errors[0] and "expected Long" in errors[0]
    assert "Traceback" not in output and "serving" not in output


def test_a_policy_set_naming_a_fronted_servers_tool_it_cannot_serve_stops_serve_with_cedars_message(
    tmp_path: Path,
) -> None:
    """A fronted server's tools are known only once it is listed, inside the server's start: a set naming one that
    is not served (unreviewed) leaves no set in force, so the start is refused as a configuration error, with one
    ``countersign:`` line naming the policy and what Cedar said, exit 1, and no traceback."""
    filesystem = installed_or_skipped("the filesystem MCP server", install_filesystem_server)
    policies = tmp_path / "files.cedar"
    policies.write_text(
        '@id("staff-read-files") permit (principal, action == Action::"files_read_text_file", resource)\n'
        'when { context.arguments.path like "/srv/*" };'
    )
    config = tmp_path / "countersign.toml"
    config.write_text(files_upstream_config(filesystem, tmp_path, ("staff",)))
    environ = clean_environ(COUNTERSIGN_POLICIES=str(policies), COUNTERSIGN_AUDIT_SECRET=TEST_AUDIT_SECRET)
    with serve(tmp_path, "--config", str(config), "serve", "--port", str(free_port()), environ=environ) as process:
        status = process.process.wait(timeout=60)
    output = process.output()
    errors = [line for line in output.splitlines() if line.startswith("countersign:")]
    assert status == 1 and len(errors) == 1, output
    assert "no policy set in force" in errors[0] and "staff-read-files" in errors[0], output
    assert "files_read_text_file" in errors[0]
    assert "Traceback" not in output and READY not in output
