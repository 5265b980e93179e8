"""Policy files put in force as the files and the catalog change: the orders adapter's real tools, and the rooms
adapter's as the tools a registration adds."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from adapters.orders import TOOLS as ORDERS
from adapters.rooms import TOOLS as ROOMS
from gateway.cedar.files import PolicyReloader, file_text
from gateway.config.org_adapters import OrgAdapters
from gateway.principal import Principal
from gateway.tools.declarations import Tool
from policies.access import decide_access, decide_call
from tests.cedar.test_engine import EXAMPLE

REFUND = next(tool for tool in ORDERS if tool.name == "orders_refund_create")
ORGS = OrgAdapters({"acme": frozenset({"orders", "rooms"})})
SUPPORT = Principal(subject="sam@acme.example", org="acme", roles=frozenset({"support"}), key_id="key_sam")
ROOM_TOOL = ROOMS[0].name
ROOM_POLICY = (
    f'\n@id("support-uses-rooms")\npermit (principal in Role::"support", action == Action::"{ROOM_TOOL}", resource);\n'
)


class _DecimalAmount(BaseModel):
    """The refund tool as a re-reviewed backend might declare it: the amount a number with decimals, which has no
    exact Cedar type (`gateway.cedar.schema`)."""

    model_config = ConfigDict(extra="forbid")
    order_id: str
    amount_cents: float
    reason: str


def _reloader(path: Path, served: list[Tool], static: list[Tool] | None = None) -> PolicyReloader:
    return PolicyReloader.starting(file_text(path), str(path), static if static is not None else served, lambda: served)


def _refund(cents: Any) -> dict[str, Any]:
    return {"order_id": "ord-1001", "amount_cents": cents, "reason": "damaged"}


def test_a_set_naming_a_tool_registered_later_is_held_until_the_catalog_serves_it(tmp_path: Path) -> None:
    """At start only the in-process tools are known: the set waits with nothing permitted, then is in force."""
    path = tmp_path / "policies.cedar"
    path.write_text(EXAMPLE + ROOM_POLICY)
    served = list(ORDERS)
    reloader = _reloader(path, served, static=list(ORDERS))
    assert reloader.held and reloader.last_error is not None and "support-uses-rooms" in reloader.last_error
    assert not decide_access(REFUND, SUPPORT, ORGS, reloader.engine).allowed  # nothing permitted meanwhile
    served.extend(ROOMS)  # the registration arrives
    assert reloader.reload() is not None
    assert not reloader.held and reloader.last_error is None
    assert decide_access(ROOMS[0], SUPPORT, ORGS, reloader.engine).allowed
    assert decide_access(REFUND, SUPPORT, ORGS, reloader.engine).allowed


def test_the_set_is_validated_again_when_the_catalog_changes(tmp_path: Path) -> None:
    """Same text, new tools: the set is compiled against the new schema; nothing changed: nothing is done."""
    path = tmp_path / "policies.cedar"
    path.write_text(EXAMPLE)
    served = list(ORDERS)
    reloader = _reloader(path, served)
    before = reloader.engine.compiled
    assert reloader.reload() is None
    served.extend(ROOMS)
    again = reloader.reload()
    assert again is not None and again.schema != before.schema and again.name == before.name
    assert reloader.last_error is None


def test_a_set_that_no_longer_validates_after_a_catalog_change_stays_in_force_and_says_why(tmp_path: Path) -> None:
    """The refund's amount becomes a decimal number: the numeric forbid is refused with Cedar's message, the set in
    force stays, and a call its forbid cannot be evaluated for is refused in its name rather than let through."""
    path = tmp_path / "policies.cedar"
    path.write_text(EXAMPLE)
    served = list(ORDERS)
    reloader = _reloader(path, served)
    active = reloader.engine.active
    retyped = dataclasses.replace(REFUND, arguments=_DecimalAmount)
    served[served.index(REFUND)] = retyped
    assert reloader.reload() is None
    assert reloader.engine.active == active
    assert reloader.last_error is not None and "refunds-over-500-forbidden" in reloader.last_error
    answer = decide_call(retyped, SUPPORT, ORGS, reloader.engine, _refund(60000.0), tainted=False)
    assert not answer.decision.allowed
    assert answer.policy_ids == ("refunds-over-500-forbidden",)
    served[served.index(retyped)] = REFUND  # the catalog the set in force was validated against: nothing to load
    assert reloader.reload() is None and reloader.last_error is None


def test_an_edited_file_that_does_not_validate_keeps_the_set_in_force(tmp_path: Path) -> None:
    """A wrong argument type: refused with Cedar's message, once per text; the fixed file goes in force."""
    path = tmp_path / "policies.cedar"
    path.write_text(EXAMPLE)
    reloader = _reloader(path, list(ORDERS))
    active = reloader.engine.active
    path.write_text(EXAMPLE + '@id("typo") permit (principal, action, resource) when { context.tainted == 1 };')
    assert reloader.reload() is None and reloader.engine.active == active
    assert reloader.last_error is not None and "typo" in reloader.last_error
    path.write_text(EXAMPLE + ROOM_POLICY.replace(ROOM_TOOL, "orders_get"))
    assert reloader.reload() is not None and reloader.engine.active != active
