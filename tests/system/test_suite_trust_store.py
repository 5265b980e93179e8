"""The suite's processes trust no TLS server, and the installers of its pinned tools still trust the machine's CAs
(`tests.support.trust_store`)."""

from __future__ import annotations

import os
import ssl
import sys
from collections.abc import Callable

import httpx
import httpx2
import pytest

from tests.support.cached_install import run_step
from tests.support.trust_store import TRUST_NOTHING

DISCARDED_CA = "Countersign tests: a CA whose key was thrown away"


class StepFailedError(Exception):
    pass


@pytest.mark.parametrize(
    "context",
    [httpx.create_ssl_context, httpx2.create_ssl_context, ssl.create_default_context],
    ids=["httpx", "httpx2", "ssl-defaults"],
)
def test_a_client_built_in_a_test_trusts_only_the_ca_whose_key_was_thrown_away(
    context: Callable[[], ssl.SSLContext],
) -> None:
    """Whichever way a client finds its trust store, it holds one CA, so building one costs no bundle load."""
    subjects = [dict(item[0] for item in ca["subject"]) for ca in context().get_ca_certs()]
    assert subjects == [{"commonName": DISCARDED_CA}]


def test_an_install_step_runs_with_the_machines_own_trust_settings() -> None:
    """npm and pip reach their registries over TLS: a step never sees the suite's trust store."""
    sees_ours = f"import os, sys; sys.exit(os.environ.get('SSL_CERT_FILE') == {str(TRUST_NOTHING)!r})"
    assert os.environ["SSL_CERT_FILE"] == str(TRUST_NOTHING)
    run_step([sys.executable, "-c", sees_ours], error=StepFailedError, timeout=30, what="probe")
