"""`countersign serve` as a strict process: it binds before it says "serving", a port in use or an
exposed bind without allow-lists is one error and exit 1 with nothing left running, and SIGINT or
SIGTERM stop it within 10 s at any point, startup included."""

from __future__ import annotations

import contextlib
import signal
import socket
from pathlib import Path

import anyio
import pytest

from tests.support.agents import LEGACY, agent
from tests.support.processes import READY, children_of, processes_using, serve
from tests.support.redis_server import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

STOP_SECONDS = 10.0


def _nothing_left(tmp_path: Path) -> None:
    assert processes_using(tmp_path) == [], "a process still uses the data directory"
    assert not (tmp_path / ".countersign" / "embedded.json").exists(), "the embedded server was left running"


def test_a_port_in_use_is_one_error_and_exit_1_with_nothing_started(tmp_path: Path) -> None:
    """Someone else listens on the port: serve says so once, exits 1 within 10 s, and no Valkey or demo
    backend was started (or is left) for it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with serve(tmp_path, "serve", "--port", str(port)) as process:
            status = process.process.wait(timeout=STOP_SECONDS)
    output = process.output()
    assert status == 1
    errors = [line for line in output.splitlines() if line.startswith("countersign:")]
    assert errors == [f"countersign: cannot listen on 127.0.0.1:{port}: the address is already in use"], output
    assert "Traceback" not in output and "serving" not in output
    assert not (tmp_path / ".countersign" / "appendonlydir").exists(), "the embedded Valkey was started"
    _nothing_left(tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_startup_stops_everything_started_so_far(tmp_path: Path, signum: signal.Signals) -> None:
    """The signal lands while the embedded Valkey and the demo backends start: serve exits 0 within
    10 s, and whatever it had started is stopped."""
    with serve(tmp_path, "serve", "--port", str(free_port())) as process:
        process.wait_for("Countersign is starting")
        status, seconds = process.stop(signum, timeout=STOP_SECONDS)
    output = process.output()
    assert status == 0 and seconds < STOP_SECONDS, output
    assert "Countersign stopped." in output and "Traceback" not in output
    _nothing_left(tmp_path)


async def test_sigterm_with_an_open_session_stops_within_10_seconds(tmp_path: Path) -> None:
    """A stateful MCP session is open (its event stream too) when SIGTERM arrives: serve still stops in
    time, and takes its Valkey child with it."""
    port = free_port()
    with serve(tmp_path, "serve", "--port", str(port)) as process:
        output = process.wait_for(READY)
        key = output.split("demo agent key (demo@acme.example, org acme): ", 1)[1].split()[0]
        [valkey] = children_of(process.pid)
        # The client sees the server go away mid-session; how it reports that is not under test.
        with contextlib.suppress(Exception):
            async with agent(f"http://127.0.0.1:{port}/mcp", key, mode=LEGACY) as client:
                assert not (await client.call_tool("rooms_list", {})).is_error
                status, seconds = await anyio.to_thread.run_sync(process.stop)
    assert status == 0 and seconds < STOP_SECONDS, process.output()
    assert not Path(f"/proc/{valkey}").exists()
    _nothing_left(tmp_path)


@pytest.mark.parametrize(
    ("configured", "missing"),
    [("", "allowed_hosts, allowed_origins"), ('allowed_hosts = ["gateway.example:8765"]', "allowed_origins")],
)
def test_binding_beyond_loopback_without_both_allow_lists_refuses_to_start(
    tmp_path: Path, configured: str, missing: str
) -> None:
    """``0.0.0.0`` with the loopback defaults would trust any Host: exit 1 naming both settings, before
    anything starts or binds."""
    config = tmp_path / "countersign.toml"
    config.write_text(f'[gateway]\nhost = "0.0.0.0"\nport = {free_port()}\n{configured}\n')
    with serve(tmp_path, "serve", "--demo", "--config", str(config)) as process:
        status = process.process.wait(timeout=STOP_SECONDS)
    output = process.output()
    assert status == 1, output
    assert "allowed_hosts and allowed_origins" in output and f"missing: {missing}" in output
    assert "serving" not in output
    _nothing_left(tmp_path)
