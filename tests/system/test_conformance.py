"""The official MCP conformance suite, every server scenario, in both protocol eras, against a real gateway.

The gateway runs under uvicorn against the test Redis with the suite's fixture tools as an ordinary
adapter (`tests.support.conformance`): declared, access-checked, audited and sealed like any tool.
The suite cannot send a bearer key, so the gateway's app is wrapped in a small authenticating
front that adds one and changes nothing else (`tests.support.bearer_proxy`). What the gateway
deliberately does not offer is listed, each entry with its reason, in
``tests/data/conformance-expected-failures.toml``; the suite fails the run on any other failure and
on a listed entry that passes (a stale list is a failure too).

Node 22 and the pinned suite are installed into a cache on first use. With ``CI`` set the test fails
rather than skips when they cannot be had.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import ValidationError
from redis.asyncio import Redis
from starlette.datastructures import Secret

from backends.serve import serve_app_in_thread
from gateway.config.settings import AdapterSettings, OrgSettings, Settings
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from tests.support.agents import make_key
from tests.support.bearer_proxy import BearerProxy
from tests.support.conformance import ADAPTERS, TOOLS, ContactArgs, create_fixture_backend
from tests.support.conformance_suite import Suite, SuiteUnavailableError, install_suite
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

INFERRED = "inferred"
"""No --spec-version: each scenario at the version the suite infers for it. No version selects the
extensions' scenarios (tasks, skills), so this run is the one that includes them."""
RUNS = ("2025-11-25", "2026-07-28", INFERRED)
"""The handshake era (its run includes the 2025-06-18 scenarios), the stateless era, and every scenario
at its inferred version, extensions included."""
EXPECTED_FAILURES = Path(__file__).parents[1] / "data" / "conformance-expected-failures.toml"
SUITE_TIMEOUT_SECONDS = 300.0
ORG = "conformance"


def _expected() -> dict[str, str]:
    with EXPECTED_FAILURES.open("rb") as file:
        return dict(tomllib.load(file)["expected"])


@pytest.fixture(scope="module")
def suite() -> Suite:
    try:
        return install_suite()
    except SuiteUnavailableError as error:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI needs the conformance suite: {error}")
        pytest.skip(f"conformance suite unavailable: {error}")


@pytest.fixture
def settings(redis_url: str) -> Iterator[Settings]:
    """Gateway settings serving only the fixture tools, to one org, their backend under uvicorn."""
    with serve_app_in_thread(create_fixture_backend()) as backend:
        token, key = Secret(secrets.token_urlsafe(16)), Secret(secrets.token_urlsafe(32))
        yield Settings(
            redis_url=redis_url,
            audit_secret=Secret(TEST_AUDIT_SECRET),
            adapters={name: AdapterSettings(name=name, url=backend, token=token, signing_key=key) for name in ADAPTERS},
            orgs=(OrgSettings(name=ORG, adapters=frozenset(ADAPTERS), roles=frozenset({"staff"})),),
            run_worker=False,
        )


def _extensions(suite: Suite) -> set[str]:
    """The server scenarios of protocol extensions, as the suite lists them (``- name [extension]``)."""
    listed = subprocess.run(suite.command("list", "--server"), capture_output=True, text=True, timeout=60, check=True)
    return {line.split()[1] for line in listed.stdout.splitlines() if line.strip().endswith("[extension]")}


def _baseline(path: Path) -> Path:
    """The suite's expected-failures file (YAML), written from the reasoned TOML list."""
    path.write_text("\n".join(["server:", *(f"  - {entry}" for entry in sorted(_expected()))]) + "\n")
    return path


def test_every_expected_failure_states_its_reason() -> None:
    """An entry without a reason would be a failure swept under the rug."""
    expected = _expected()
    assert expected
    for entry, reason in expected.items():
        assert len(reason.split()) >= 6, f"{entry}: say why the gateway does not pass it"


_CONTACTS = st.dictionaries(
    st.sampled_from(["name", "address", "contactMethod", "phone", "email", "other"]),
    st.one_of(
        st.none(),
        st.sampled_from(["phone", "email", "x"]),
        st.integers(0, 2),
        st.sampled_from([{}, {"city": "Bern"}, {"city": 1}, {"street": None}, {"floor": 3}]),
    ),
)


@given(_CONTACTS)
def test_the_2020_12_fixture_tool_accepts_exactly_what_its_listed_schema_accepts(arguments: dict[str, object]) -> None:
    """The schema the suite reads is written out by hand; the executor's validator must agree with it."""
    listed = Draft202012Validator(ContactArgs.model_json_schema()).is_valid(arguments)
    try:
        ContactArgs.model_validate(arguments)
        validated = True
    except ValidationError:
        validated = False
    assert validated == listed, arguments


@pytest.mark.parametrize("era", RUNS)
async def test_the_official_conformance_suite_passes_every_server_scenario_but_the_listed_ones(
    suite: Suite, redis: Redis, settings: Settings, era: str, tmp_path: Path
) -> None:
    """Every server scenario of the era runs; the run fails on an unlisted failure or a listed pass."""
    key = await make_key(redis, org=ORG, subject="suite@conformance.example")
    baseline = _baseline(tmp_path / "baseline.yml")
    version = [] if era == INFERRED else ["--spec-version", era]
    with serve_app_in_thread(BearerProxy(create_app(settings, tools=TOOLS), key), lifespan=True) as proxy:
        command = suite.command("server", "--url", f"{proxy}/mcp", "--suite", "all", *version, "--expected-failures",
                                str(baseline), "-o", str(tmp_path / "results"))  # fmt: skip
        # Blocking is fine: the gateway runs on its own thread's loop.
        done = subprocess.run(command, capture_output=True, text=True, timeout=SUITE_TIMEOUT_SECONDS, check=False)
    report = done.stdout[-8000:] + done.stderr[-2000:]
    assert done.returncode == 0, report
    ran = {line.split()[1].rstrip(":") for line in done.stdout.splitlines() if line.startswith(("✓", "✗"))}
    assert ran, report
    if era == INFERRED:
        assert _extensions(suite) <= ran, report
    # The calls went through the pipeline: each is in the audit trail, refusals of unknown names too.
    audited = {event.tool for event in await RedisStreamAuditSink(redis).recent(1000)}
    called = {"test_simple_text", "test_error_handling"} | ({"slow_compute"} if era == INFERRED else set())
    assert called <= audited, audited
