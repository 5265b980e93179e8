"""``countersign policy``: show, validate, test and explain, on the demo's tools and a real Redis."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from adapters.orders import TOOLS as ORDER_TOOLS
from gateway.cedar.builtin import builtin_policies
from gateway.cedar.engine import CedarEngine, compile_policies
from gateway.cli.main import main
from gateway.cli.policy import show_builtin
from gateway.config.approvals import ApprovalSettings, Bound, PolicyRule
from gateway.config.settings import Settings
from gateway.principal import KeyKind, Principal
from gateway.runtime.app import tools_for
from policies.access import decide_access, decide_call
from policies.engine import AUTO
from tests.cedar.test_engine import EXAMPLE
from tests.support.examples import examples

pytestmark = pytest.mark.anyio

DEMO = {"COUNTERSIGN_MODE": "demo"}

CASES = """
[[case]]
name = "refunds over 500.00 are refused to anyone"
principal = { subject = "sam@acme.example", org = "acme", roles = ["support", "finance"] }
tool = "orders_refund_create"
arguments = { order_id = "ord-1001", amount_cents = 60000, reason = "damaged" }
expect = "deny"

[[case]]
name = "small refunds by support approve themselves"
principal = { subject = "sam@acme.example", org = "acme", roles = ["support"] }
tool = "orders_refund_create"
arguments = { order_id = "ord-1001", amount_cents = 1500, reason = "damaged" }
expect = "auto"

[[case]]
name = "tainted small refunds wait for a person"
principal = { subject = "sam@acme.example", org = "acme", roles = ["support"] }
tool = "orders_refund_create"
arguments = { order_id = "ord-1001", amount_cents = 1500, reason = "damaged" }
tainted = true
expect = "allow"

[[case]]
name = "refunds between need two finance approvers"
principal = { subject = "sam@acme.example", org = "acme", roles = ["support"] }
tool = "orders_refund_create"
arguments = { order_id = "ord-1001", amount_cents = 30000, reason = "damaged" }
expect = "2"
approver_role = "finance"

[[case]]
name = "viewers do not see refunds"
principal = { subject = "vic@acme.example", org = "acme", roles = ["viewer", "support"] }
tool = "orders_refund_create"
arguments = { order_id = "ord-1001", amount_cents = 100, reason = "damaged" }
expect = "deny"
listed = false
"""


def test_policy_show_prints_the_builtin_rules_as_cedar_that_validates(capsys: pytest.CaptureFixture[str]) -> None:
    """Every served tool has its access permit, and the text validates against the tools' schema."""
    assert main(["policy", "show"], DEMO) == 0
    text = capsys.readouterr().out
    tools = tools_for(Settings.load(DEMO, None))
    assert all(f'@id("access:{tool.name}")' in text for tool in tools)
    compile_policies(text, tools, source="show")


def test_policy_validate_refuses_a_wrong_argument_type_with_cedars_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1, and the message names the policy and the type Cedar expected; a good file is valid."""
    good, bad = tmp_path / "good.cedar", tmp_path / "bad.cedar"
    good.write_text(EXAMPLE)
    bad.write_text('@id("typo") forbid (principal, action == Action::"orders_refund_create", resource)\n'
                   'when { context.arguments.amount_cents > "500" };')  # fmt: skip
    assert main(["policy", "validate", str(good)], DEMO) == 0
    assert "valid: " in capsys.readouterr().out
    assert main(["policy", "validate", str(bad)], DEMO) == 1
    err = capsys.readouterr().err
    assert "typo" in err and "expected Long" in err


def test_policy_test_runs_the_cases_and_fails_on_a_wrong_expectation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Five cases pass on the example set; a case expecting the wrong outcome makes it exit 1."""
    (tmp_path / "refunds.cedar").write_text(EXAMPLE)
    (tmp_path / "cases.toml").write_text(CASES)
    assert main(["policy", "test", str(tmp_path)], DEMO) == 0
    assert "5 passed, 0 failed" in capsys.readouterr().out
    (tmp_path / "cases.toml").write_text(CASES.replace('expect = "auto"', 'expect = "deny"'))
    assert main(["policy", "test", str(tmp_path)], DEMO) == 1
    assert "FAIL small refunds by support approve themselves" in capsys.readouterr().out


async def test_policy_explain_names_the_deciding_policy_for_a_stored_key(
    redis: Redis, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """explain resolves the key from the store and names the policy Cedar reports, each time."""
    from gateway.store.keys import KeyStore

    _token, record = await KeyStore(redis).create(
        kind=KeyKind.AGENT, subject="sam@acme.example", org="acme", roles=("support",)
    )
    policies = tmp_path / "refunds.cedar"
    policies.write_text(EXAMPLE)
    environ = DEMO | {"COUNTERSIGN_REDIS_URL": redis_url}
    expected = {
        60000: ("deny", "refunds-over-500-forbidden"),
        1500: ("approve: auto", "small-refunds-by-support"),
        30000: ("approve: 2 approver(s), approver role finance", "refunds-need-two-finance"),
    }
    for cents, (outcome, policy) in expected.items():
        call = json.dumps({"order_id": "ord-1001", "amount_cents": cents, "reason": "x"})
        argv = ["policy", "explain", "--key", record.key_id, "--tool", "orders_refund_create"]
        argv += ["--policies", str(policies), "--args", call]
        assert await anyio.to_thread.run_sync(main, argv, environ) == 0
        out = capsys.readouterr().out
        assert outcome in out and f"deciding policies: {policy}" in out


RULES = ApprovalSettings(
    policies={
        "small-refunds": PolicyRule(
            tool="orders_refund_create", requester_roles=["support"], arguments={"amount_cents": Bound(max=2_000)}
        )
    }
)
_ROLES = ("staff", "support", "viewer", "finance")


@settings(database=None, deadline=None, max_examples=examples(150))
@given(
    roles=st.frozensets(st.sampled_from(_ROLES), max_size=3),
    kind=st.sampled_from(KeyKind),
    org=st.sampled_from(("acme", "globex", "initech")),
    cents=st.integers(min_value=1, max_value=100_000),
)
def test_the_generated_policies_decide_as_the_builtin_rules(
    roles: frozenset[str], kind: KeyKind, org: str, cents: int
) -> None:
    """For every demo tool, the policy set `policy show` prints lists and refuses exactly as the built-in
    rules do, and its translated [approvals] rule approves exactly the refunds the TOML rule admits."""
    demo = Settings.load(DEMO, None)
    tools = tools_for(demo)
    engine = CedarEngine(compile_policies(builtin_policies(tools, RULES.policies, {}), tools, source="builtin"))
    principal = Principal(subject="p@acme.example", org=org, roles=roles, kind=kind, key_id="key_p")
    for tool in tools:
        builtin = decide_access(tool, principal, demo.org_adapters, None).allowed
        assert decide_access(tool, principal, demo.org_adapters, engine).allowed is builtin, tool.name
    refund = next(tool for tool in ORDER_TOOLS if tool.name == "orders_refund_create")
    arguments = {"order_id": "ord-1001", "amount_cents": cents, "reason": "x"}
    answer = decide_call(refund, principal, demo.org_adapters, engine, arguments, tainted=False)
    admitted = decide_access(refund, principal, demo.org_adapters, None).allowed and cents <= 2_000
    assert answer.decision.allowed is decide_access(refund, principal, demo.org_adapters, None).allowed
    assert (answer.approvals == AUTO) is admitted


def test_policy_show_includes_the_approval_rules_and_tool_scopes() -> None:
    """The [approvals] rules and the scopes a token needs are in the printed set, each with its id."""
    demo = Settings.load(DEMO, None)
    tools = tools_for(demo)
    text = builtin_policies(tools, RULES.policies, {"orders_refund_create": frozenset({"orders:write"})})
    assert '@id("approvals:small-refunds") @approval("auto")' in text
    assert '@id("scopes:orders_refund_create")' in text and '"orders:write"' in text
    engine = CedarEngine(compile_policies(text, tools, source="builtin"))
    refund = next(tool for tool in tools if tool.name == "orders_refund_create")
    token = Principal(
        subject="t@acme.example", org="acme", roles=frozenset({"support"}), key_id="tok_1", scopes=frozenset()
    )
    arguments = {"order_id": "ord-1001", "amount_cents": 100, "reason": "x"}
    assert not decide_call(refund, token, demo.org_adapters, engine, arguments, tainted=False).decision.allowed
    assert decide_access(refund, token, demo.org_adapters, engine).allowed  # listed: it can ask for the scope
    assert show_builtin(demo, tools).startswith("// The built-in rules")
