"""The Cedar engine on the orders adapter's real tools: the example policy set, load-time validation, agreement."""

from __future__ import annotations

from typing import Any

import cedarpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.orders import TOOLS
from gateway.cedar.engine import CedarEngine, compile_policies
from gateway.cedar.schema import context_of, entities_of
from gateway.codes import Code
from gateway.config.org_adapters import OrgAdapters
from gateway.errors import ConfigError
from gateway.principal import KeyKind, Principal
from gateway.tools.declarations import Tool
from policies.access import decide_access, decide_call
from policies.engine import AUTO
from tests.support.examples import examples

REFUND = next(tool for tool in TOOLS if tool.name == "orders_refund_create")
ORGS = OrgAdapters({"acme": frozenset({"orders"})})

EXAMPLE = """
@id("refunds-over-500-forbidden")
forbid (principal, action == Action::"orders_refund_create", resource)
when { context.arguments.amount_cents > 50000 };

@id("small-refunds-by-support") @approval("auto")
permit (principal in Role::"support", action == Action::"orders_refund_create", resource)
when { context.arguments.amount_cents < 2000 };

@id("refunds-need-two-finance") @approval("2") @approver_role("finance")
permit (principal in Role::"support", action == Action::"orders_refund_create", resource)
when { context.arguments.amount_cents >= 2000 };

@id("viewers-never-see-refunds")
forbid (principal in Role::"viewer", action == Action::"orders_refund_create", resource);

@id("everyone-reads-orders")
permit (principal, action in Action::"read", resource);
"""


def _engine(text: str = EXAMPLE) -> CedarEngine:
    return CedarEngine(compile_policies(text, TOOLS, source="example.cedar"))


def _who(*roles: str) -> Principal:
    return Principal(subject="ann@acme.example", org="acme", roles=frozenset(roles), key_id="key_ann")


def _refund(cents: int) -> dict[str, Any]:
    return {"order_id": "ord_1001", "amount_cents": cents, "reason": "damaged"}


@pytest.mark.parametrize(
    ("cents", "tainted", "allowed", "approvals", "role", "policy"),
    [
        (1500, False, True, AUTO, None, "small-refunds-by-support"),
        (1500, True, True, None, None, "small-refunds-by-support"),
        (2000, False, True, 2, "finance", "refunds-need-two-finance"),
        (50000, False, True, 2, "finance", "refunds-need-two-finance"),
        (50001, False, False, None, None, "refunds-over-500-forbidden"),
    ],
)
def test_example_refund_policy_decides_by_amount_and_taint(
    cents: int, tainted: bool, allowed: bool, approvals: int | None, role: str | None, policy: str
) -> None:
    """Over 500.00 is forbidden; under 20.00 auto-approves unless tainted; between needs two finance approvers."""
    answer = decide_call(REFUND, _who("support"), ORGS, _engine(), _refund(cents), tainted=tainted)
    assert answer.decision.allowed is allowed
    assert answer.approvals == approvals
    assert answer.approver_role == role
    assert policy in answer.policy_ids
    assert policy in answer.decision.reason


def test_viewer_neither_sees_nor_calls_the_refund_tool() -> None:
    """The viewer's hiding forbid applies to listing and calling alike, and the call names the policy."""
    engine = _engine()
    assert not decide_access(REFUND, _who("viewer", "support"), ORGS, engine).allowed
    answer = decide_call(REFUND, _who("viewer", "support"), ORGS, engine, _refund(100), tainted=False)
    assert answer.decision.code is Code.PERMISSION_DENIED
    assert answer.policy_ids == ("viewers-never-see-refunds",)


def test_a_tool_is_listed_while_some_arguments_could_be_allowed() -> None:
    """An argument-dependent forbid does not hide the tool; no permit at all does."""
    engine = _engine()
    assert decide_access(REFUND, _who("support"), ORGS, engine).allowed
    assert not decide_access(REFUND, _who("clerk"), ORGS, engine).allowed


def test_a_policy_with_the_wrong_argument_type_is_refused_with_cedars_message_and_the_old_set_stays() -> None:
    """amount_cents is a Long: comparing it with a string is refused at load, naming the policy."""
    engine = _engine()
    before = engine.active
    bad = '@id("typo") permit (principal, action == Action::"orders_refund_create", resource)\n'
    bad += 'when { context.arguments.amount_cents > "500" };'
    with pytest.raises(ConfigError) as refused:
        engine.load(bad, TOOLS, source="bad.cedar")
    assert "typo" in str(refused.value)
    assert "expected Long" in str(refused.value) or "Long" in str(refused.value)
    assert engine.active == before
    answer = decide_call(REFUND, _who("support"), ORGS, engine, _refund(60000), tainted=False)
    assert answer.policy_ids == ("refunds-over-500-forbidden",)


def test_a_policy_naming_an_unknown_argument_is_refused() -> None:
    """The schema comes from the tool's argument model, so a misspelt argument does not validate."""
    bad = 'permit (principal, action == Action::"orders_refund_create", resource)'
    bad += " when { context.arguments.amount > 1 };"
    with pytest.raises(ConfigError):
        compile_policies(bad, TOOLS, source="bad.cedar")


_ROLES = ("support", "viewer", "finance", "clerk")
_CONDITIONS = ("", " when { context.arguments has order_id }", ' when { principal.org == "acme" }')


@st.composite
def _policy_sets(draw: st.DrawFn) -> str:
    lines = []
    for index in range(draw(st.integers(min_value=0, max_value=5))):
        effect = draw(st.sampled_from(("permit", "forbid")))
        role = draw(st.sampled_from(_ROLES))
        tool = draw(st.sampled_from([tool.name for tool in TOOLS]))
        scope = draw(st.sampled_from((f'principal in Role::"{role}"', "principal")))
        condition = (
            draw(st.sampled_from(_CONDITIONS))
            if tool != "orders_refund_create"
            else draw(st.sampled_from((*_CONDITIONS, " when { context.arguments.amount_cents > 2000 }")))
        )
        lines.append(f'@id("p{index}") {effect} ({scope}, action == Action::"{tool}", resource){condition};')
    return "\n".join(lines)


@settings(database=None, deadline=None, max_examples=examples(200))
@given(
    text=_policy_sets(),
    roles=st.frozensets(st.sampled_from(_ROLES), max_size=3),
    tool=st.sampled_from(TOOLS),
    cents=st.integers(min_value=1, max_value=100000),
)
def test_a_hidden_tool_is_never_callable(text: str, roles: frozenset[str], tool: Tool, cents: int) -> None:
    """For every generated policy set, a tool the catalog hides is refused for any arguments."""
    engine = CedarEngine(compile_policies(text, TOOLS, source="generated"))
    principal = _who(*roles)
    listed = decide_access(tool, principal, ORGS, engine).allowed
    arguments: dict[str, Any] = {"order_id": "ord_1001", "amount_cents": cents, "reason": "x"}
    called = decide_call(tool, principal, ORGS, engine, arguments, tainted=False).decision.allowed
    assert listed or not called


@pytest.mark.parametrize(
    ("principal", "orgs"),
    [
        (Principal(subject="ann@acme.example", org="acme", roles=frozenset(), kind=KeyKind.ADMIN), ORGS),
        (_who("support"), OrgAdapters({"acme": frozenset({"rooms"})})),
    ],
)
def test_no_policy_opens_a_tool_to_an_admin_key_or_to_an_org_without_its_adapter(
    principal: Principal, orgs: OrgAdapters
) -> None:
    """The structural checks stand in front of every policy: a permit-all set changes nothing about them."""
    engine = _engine("permit (principal, action, resource);")
    assert not decide_access(REFUND, principal, orgs, engine).allowed
    assert not decide_call(REFUND, principal, orgs, engine, _refund(100), tainted=False).decision.allowed


def test_an_auto_policy_approves_a_tainted_proposal_only_when_its_condition_reads_the_taint() -> None:
    """A policy that says what a tainted proposal gets (here: tiny ones) is taken at its word."""
    text = EXAMPLE + (
        '\n@id("tiny-even-tainted") @approval("auto")\n'
        'permit (principal in Role::"support", action == Action::"orders_refund_create", resource)\n'
        "when { context.tainted && context.arguments.amount_cents <= 500 };\n"
    )
    engine = _engine(text)
    tiny = decide_call(REFUND, _who("support"), ORGS, engine, _refund(400), tainted=True)
    assert (tiny.approvals, tiny.auto_policy) == (AUTO, "tiny-even-tainted")
    small = decide_call(REFUND, _who("support"), ORGS, engine, _refund(1500), tainted=True)
    assert small.approvals is None and small.decision.allowed


@settings(database=None, deadline=None, max_examples=examples(200))
@given(
    text=_policy_sets(),
    roles=st.frozensets(st.sampled_from(_ROLES), max_size=3),
    tool=st.sampled_from(TOOLS),
    cents=st.integers(min_value=1, max_value=100000),
)
def test_deciding_over_the_policies_a_call_can_match_is_deciding_over_the_whole_set(
    text: str, roles: frozenset[str], tool: Tool, cents: int
) -> None:
    """The engine hands Cedar only the policies whose scope can match the call; Cedar over the whole set agrees."""
    compiled = compile_policies(text, TOOLS, source="generated")
    principal = _who(*roles)
    arguments: dict[str, Any] = {"order_id": "ord-1001", "amount_cents": cents, "reason": "x"}
    answer = CedarEngine(compiled).decide(tool, principal, arguments, tainted=False)
    request = {
        "principal": {"type": "Principal", "id": principal.key_id},
        "action": {"type": "Action", "id": tool.name},
        "resource": {"type": "Tool", "id": tool.name},
        "context": context_of(tool, arguments, tainted=False),
    }
    whole = cedarpy.is_authorized(request, compiled.policies, entities_of(tool, principal))
    assert answer.decision.allowed is whole.allowed
    assert answer.policy_ids == tuple(sorted(compiled.ids[reason] for reason in whole.diagnostics.reasons))
