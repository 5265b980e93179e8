"""Every collaborator that guards safety is a required argument: a service built without one is a `TypeError`,
never a service that quietly skips the check (an always-writable guard, no audit, no change feed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gateway.approvals.service import CardService
from gateway.config.approvals import ApprovalSettings
from gateway.executor import AgentPath, Invoker, PolicyApprovals, ReadMemory, TaskPath, WritePath
from gateway.executor.read_memory import AuditAfter
from gateway.provenance import HistoryRules
from gateway.store.call_history import RedisCallHistory
from gateway.store.client import connect

_GIVEN = object()
"""Stands for a collaborator: these constructors only keep what they are given."""


def _unconnected() -> Any:
    return connect("redis://127.0.0.1:9/0").client


def _both_paths() -> dict[str, Any]:
    """What the agent's path and the write path are both given."""
    return dict.fromkeys(("tools", "org_adapters", "policy", "audit", "invoker", "ledger", "guard", "healthy"), _GIVEN)


SERVICES: dict[str, tuple[Callable[..., object], Callable[[], dict[str, Any]]]] = {
    "CardService": (
        CardService,
        lambda: {"ledger": _GIVEN, "audit": _GIVEN, "writable": _GIVEN, "changes": _GIVEN},
    ),
    "RedisCallHistory": (RedisCallHistory, lambda: {"client": _unconnected(), "audit": _GIVEN}),
    "ReadMemory": (ReadMemory, lambda: {"history": _GIVEN, "rules": HistoryRules(), "audited": _GIVEN}),
    "AuditAfter": (AuditAfter, lambda: {"history": _GIVEN, "audit": _GIVEN}),
    "Invoker": (Invoker, lambda: {"clients": {}, "identity": _GIVEN, "ledger": _GIVEN}),
    "PolicyApprovals": (
        PolicyApprovals,
        lambda: {"ledger": _GIVEN, "audit": _GIVEN, "settings": ApprovalSettings(), "announce": _GIVEN},
    ),
    "TaskPath": (TaskPath, lambda: {"ledger": _GIVEN, "audit": _GIVEN, "limiter": _GIVEN, "limits": _GIVEN}),
    "AgentPath": (
        AgentPath,
        lambda: {**_both_paths(), **dict.fromkeys(("limiter", "limits", "policies", "memory"), _GIVEN)},
    ),
    "WritePath": (
        WritePath,
        lambda: {
            **_both_paths(),
            **dict.fromkeys(("live_principal", "subject_revoked", "receipts"), _GIVEN),
            "lease_ms": 30_000,
            "reconcile_horizon_ms": 3_600_000,
        },
    ),
}

REQUIRED = [
    ("CardService", "writable"),
    ("CardService", "changes"),
    ("CardService", "audit"),
    ("CardService", "ledger"),
    ("RedisCallHistory", "audit"),
    ("ReadMemory", "audited"),
    ("ReadMemory", "history"),
    ("AuditAfter", "audit"),
    ("Invoker", "identity"),
    ("Invoker", "ledger"),
    ("PolicyApprovals", "audit"),
    ("PolicyApprovals", "ledger"),
    ("PolicyApprovals", "announce"),
    ("TaskPath", "audit"),
    ("TaskPath", "ledger"),
    ("TaskPath", "limiter"),
    ("TaskPath", "limits"),
    ("AgentPath", "audit"),
    ("AgentPath", "ledger"),
    ("AgentPath", "guard"),
    ("AgentPath", "limiter"),
    ("AgentPath", "policies"),
    ("AgentPath", "memory"),
    ("AgentPath", "policy"),
    ("WritePath", "audit"),
    ("WritePath", "ledger"),
    ("WritePath", "guard"),
    ("WritePath", "live_principal"),
    ("WritePath", "subject_revoked"),
    ("WritePath", "receipts"),
    ("WritePath", "policy"),
]


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_each_service_builds_with_every_collaborator_given(service: str) -> None:
    """The table's arguments are complete: what the other test leaves out is the only thing missing."""
    make, given = SERVICES[service]
    make(**given())


@pytest.mark.parametrize(("service", "collaborator"), REQUIRED)
def test_a_service_built_without_a_safety_collaborator_is_a_type_error(service: str, collaborator: str) -> None:
    """Leaving the collaborator out does not fall back to a default that skips its check: it does not construct."""
    make, given = SERVICES[service]
    arguments = given()
    del arguments[collaborator]
    with pytest.raises(TypeError) as refused:
        make(**arguments)
    assert repr(collaborator) in str(refused.value)
