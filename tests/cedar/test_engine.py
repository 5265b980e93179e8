"""The Cedar engine on the orders adapter's real tools: the example policy set, load-time validation, agreement."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import anyio
import cedarpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.orders import TOOLS
from gateway.cedar.engine import CedarEngine, CompiledPolicies, compile_policies
from gateway.cedar.schema import context_of, entities_of
from gateway.codes import Code
from gateway.config.org_adapters import OrgAdapters
from gateway.errors import ConfigError
from gateway.principal import KeyKind, Principal
from gateway.tools.catalog import Catalog
from gateway.tools.declarations import Mode, Tool
from policies.access import decide_access, decide_call
from policies.engine import AUTO
from tests.support.examples import examples
from tests.support.executors import agent_path, toolbox
from tests.support.like_patterns import SURROGATE, Element, cedar_literal, cedar_pattern, like_strings
from tests.support.like_patterns import patterns as like_patterns

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
_WRITES = [tool.name for tool in TOOLS if tool.mode is Mode.WRITE]
_ANYWHERE = (
    'principal.org == "acme"',
    'resource.mode == "write"',
    "principal.token",
    "context has arguments",
    "context.arguments has order_id",
    'principal in Role::"finance"',
)
"""Conditions that validate for any action."""
_REFUND_ONLY = (
    "context.arguments.amount_cents > 2000",
    "context.arguments.amount_cents <= 50000",
    'context.arguments.reason like "*dam*"',
    'context.arguments == {"order_id": "ord_1001", "amount_cents": 1500, "reason": "x"}',
    "context.tainted",
    "context has tainted && !context.tainted",
)
"""Conditions that validate only for the refund tool's action (its arguments, and a write's taint)."""
_NOTES = ("", '@approval("auto") ', '@approval("1") ', '@approval("2") @approver_role("finance") ')


def _whole(
    compiled: CompiledPolicies, tool: Tool, principal: Principal, arguments: dict[str, Any], tainted: bool
) -> tuple[bool, tuple[str, ...]]:
    """Cedar's own answer over the whole set, the whole context and the whole entities: allowed, and the ids of
    the policies that decided."""
    request = {
        "principal": {"type": "Principal", "id": principal.key_id},
        "action": {"type": "Action", "id": tool.name},
        "resource": {"type": "Tool", "id": tool.name},
        "context": context_of(tool, arguments, tainted=tainted),
    }
    whole = cedarpy.is_authorized(request, compiled.policies, entities_of(tool, principal))
    return whole.allowed, tuple(sorted(compiled.ids[reason] for reason in whole.diagnostics.reasons))


@st.composite
def _policy_sets(draw: st.DrawFn) -> str:
    """Up to six policies over the orders tools: permits and forbids, principal scopes by anyone, a role or the
    key itself, action scopes by one tool, a group or any, conditions (``when`` and ``unless``) on the
    principal, the resource, the arguments and the taint, and the approval annotations."""
    lines = []
    for index in range(draw(st.integers(min_value=0, max_value=6))):
        effect = draw(st.sampled_from(("permit", "forbid")))
        role = draw(st.sampled_from(_ROLES))
        principal = draw(
            st.sampled_from((f'principal in Role::"{role}"', "principal", 'principal == Principal::"key_ann"'))
        )
        tool = draw(st.sampled_from([tool.name for tool in TOOLS]))
        action = draw(
            st.sampled_from(
                (f'action == Action::"{tool}"', 'action in Action::"read"', 'action in Action::"write"', "action")
            )
        )
        conditions = list(_ANYWHERE)
        if action == 'action == Action::"orders_refund_create"':
            conditions += _REFUND_ONLY
        clauses = draw(st.lists(st.sampled_from(conditions), max_size=2))
        body = "".join(f" {draw(st.sampled_from(('when', 'unless')))} {{ {clause} }}" for clause in clauses)
        notes = draw(st.sampled_from(_NOTES)) if effect == "permit" else ""
        lines.append(f'@id("p{index}") {notes}{effect} ({principal}, {action}, resource){body};')
    return "\n".join(lines)


@settings(database=None, deadline=None, max_examples=examples(300))
@given(
    text=_policy_sets(),
    roles=st.frozensets(st.sampled_from(_ROLES), max_size=3),
    tool=st.sampled_from(TOOLS),
    cents=st.sampled_from((1500, 2000, 30000, 50001)),
    reason=st.sampled_from(("damaged", "x")),
    tainted=st.booleans(),
)
def test_the_catalog_and_the_executor_agree_for_every_generated_policy_set(
    text: str, roles: frozenset[str], tool: Tool, cents: int, reason: str, tainted: bool
) -> None:
    """A tool the real catalog hides is refused by the real executor, audited with the policies that hid it,
    whatever the arguments; a listed one is decided with its arguments exactly as Cedar decides over the whole set
    and the whole context (the engine hands Cedar only the policies a call can match and what of the context they
    read)."""
    compiled = compile_policies(text, TOOLS, source="generated")
    engine = CedarEngine(compiled)
    principal = _who(*roles)
    arguments: dict[str, Any] = {"order_id": "ord_1001", "amount_cents": cents, "reason": reason}
    catalog = Catalog(toolbox(TOOLS), ORGS, engine)
    listed = tool in catalog.visible_to(principal)
    answer = engine.decide(tool, principal, arguments, tainted=tainted)
    if not listed:
        assert not answer.decision.allowed
        executor, audit = agent_path(*TOOLS, clients={}, policy=engine)
        envelope = anyio.run(executor.execute, principal, tool.name, arguments)
        assert envelope.code is Code.PERMISSION_DENIED
        [event] = audit.events
        hiding = engine.decide(tool, principal, None, tainted=False)
        assert event.outcome == "deny" and all(policy in event.reason for policy in hiding.policy_ids)
    assert (answer.decision.allowed, answer.policy_ids) == _whole(compiled, tool, principal, arguments, tainted)
    again = engine.decide(tool, principal, arguments, tainted=tainted)
    assert again == answer  # the remembered answer is the computed one


class _Drawn(NamedTuple):
    """A generated policy set on the refund tool, with the literals and patterns its conditions use."""

    text: str
    cuts: list[int]
    """The amounts it compares with."""
    patterns: list[tuple[Element, ...]]
    """The patterns it matches the reason and the order id against (`tests.support.like_patterns`)."""
    words: list[str]
    """The strings it compares them with."""


_ANY_READ = (
    "context.arguments.amount_cents {op} {cut}",
    "{cut} {op} context.arguments.amount_cents",
    'context.arguments.reason {eq} "damaged"',
    "context.arguments.amount_cents {eq} {cut}",
    'context.arguments.reason like "*dam*"',
    "context.arguments.{text} like {pattern}",
    "context.arguments.{text} like {pattern}",
    "context.arguments.{text} {eq} {word}",
    "{word} {eq} context.arguments.{text}",
    "context.arguments.amount_cents + 1 > {cut}",
    '["ord_1001", "lost"].contains(context.arguments.{text})',
    "context.arguments has reason",
    "context.tainted",
)
"""Conditions that compare the amount, the reason and the order id with literals (both ways round), match the
strings against patterns, or read them otherwise (arithmetic, ``has``, a set)."""
_STRINGS_READ = (
    "context.arguments.{text} like {pattern}",
    "context.arguments.{text} like {pattern}",
    "context.arguments.{text} like {pattern}",
    "context.arguments.{text} {eq} {word}",
    "{word} {eq} context.arguments.{text}",
)
"""Conditions that only match the strings against patterns and compare them with literals: where a wrong pattern
answer shows most often."""


@st.composite
def _threshold_sets(draw: st.DrawFn, forms: tuple[str, ...]) -> _Drawn:
    """Up to six policies on the refund tool with up to two conditions of `forms` each; string literals compared
    for equality are made from the patterns, so one string can equal a literal and match patterns at once."""
    cuts = draw(st.lists(st.integers(min_value=0, max_value=60_000), min_size=1, max_size=4))
    patterns = draw(st.lists(like_patterns(), min_size=1, max_size=3))
    words = [draw(like_strings(draw(st.sampled_from(patterns)), surrogates=False)) for _ in range(2)]
    lines = []
    for index in range(draw(st.integers(min_value=1, max_value=6))):
        effect = draw(st.sampled_from(("permit", "forbid")))
        principal = draw(st.sampled_from(('principal in Role::"support"', "principal")))
        clauses = [
            draw(st.sampled_from(forms)).format(
                op=draw(st.sampled_from(("<", "<=", ">", ">="))),
                eq=draw(st.sampled_from(("==", "!="))),
                cut=draw(st.sampled_from(cuts)),
                text=draw(st.sampled_from(("reason", "order_id"))),
                pattern=cedar_pattern(draw(st.sampled_from(patterns))),
                word=cedar_literal(draw(st.sampled_from(words))),
            )
            for _ in range(draw(st.integers(min_value=0 if forms is _ANY_READ else 1, max_value=2)))
        ]
        body = "".join(f" {draw(st.sampled_from(('when', 'unless')))} {{ {clause} }}" for clause in clauses)
        notes = draw(st.sampled_from(_NOTES)) if effect == "permit" else ""
        lines.append(
            f'@id("p{index}") {notes}{effect} ({principal}, action == Action::"orders_refund_create", resource){body};'
        )
    return _Drawn("\n".join(lines), cuts, patterns, words)


def _strings(draw: st.DrawFn, drawn: _Drawn) -> st.SearchStrategy[str]:
    """Reasons or order ids for one run of calls: a usual one, the policies' own literals, and a few built to
    match or just miss one of their patterns, so calls come back to strings that answer the policies alike and to
    ones that do not."""
    built = [draw(like_strings(draw(st.sampled_from(drawn.patterns)))) for _ in range(draw(st.integers(1, 4)))]
    return st.sampled_from(["damaged", *drawn.words, *built])


@pytest.mark.parametrize("forms", [_ANY_READ, _STRINGS_READ], ids=["any-read", "strings"])
@settings(database=None, deadline=None, max_examples=examples(500))
@given(roles=st.frozensets(st.sampled_from(("support", "clerk")), max_size=2), data=st.data())
def test_answers_remembered_across_calls_are_cedars_over_the_whole_set(
    forms: tuple[str, ...], roles: frozenset[str], data: st.DataObject
) -> None:
    """One engine answers a run of one caller's calls, each the one before with one thing changed (an amount at,
    just under or just over the policies' own literals; a reason or an order id that matches their patterns or just
    misses them, or equals their literals; the taint), so answers remembered for one value are found for others:
    each answer is the one Cedar gives over the whole set, the whole context and the whole entities, and the one an
    engine that remembers nothing computes."""
    drawn = data.draw(_threshold_sets(forms))
    text, cuts = drawn.text, drawn.cuts
    compiled = compile_policies(text, TOOLS, source="generated")
    engine = CedarEngine(compiled)
    principal = _who(*roles)
    amounts = st.builds(
        lambda cut, step: cuts[cut % len(cuts)] + step, st.sampled_from(range(4)), st.sampled_from((-1, 0, 1))
    )
    values: dict[str, st.SearchStrategy[Any]] = {
        "amount_cents": amounts,
        "reason": _strings(data.draw, drawn),
        "order_id": _strings(data.draw, drawn),
        "tainted": st.booleans(),
    }
    call = {name: data.draw(values[name]) for name in values}
    for _ in range(data.draw(st.integers(min_value=2, max_value=20))):
        arguments = {name: call[name] for name in ("order_id", "amount_cents", "reason")}
        tainted = call["tainted"]
        answer = engine.decide(REFUND, principal, arguments, tainted=tainted)
        if SURROGATE not in arguments["reason"] + arguments["order_id"]:
            whole = _whole(compiled, REFUND, principal, arguments, tainted)
            assert (answer.decision.allowed, answer.policy_ids) == whole, (text, arguments, tainted)
        # else Cedar refuses the whole context (a lone surrogate is no string to it), while the engine hands it only
        # the arguments the policies read: a refusal when they read that one, which the forgetful engine shows.
        forgetful = dataclasses.replace(compiled, callers={}, slices={}, outcomes={}, decisions={})
        assert CedarEngine(forgetful).decide(REFUND, principal, arguments, tainted=tainted) == answer
        changed = data.draw(st.sampled_from(("amount_cents", "reason", "reason", "order_id", "order_id", "tainted")))
        call[changed] = data.draw(values[changed])


def test_new_order_ids_the_patterns_answer_alike_are_decided_by_cedar_once() -> None:
    """An order id read only with ``like`` is keyed by the patterns it matches: of 120 new ids, Cedar decides one
    matching ``ord-9*`` and one not, and every other id gets the answer remembered for its side."""
    text = EXAMPLE + (
        '\n@id("nines-forbidden") forbid (principal, action == Action::"orders_refund_create", resource)'
        ' when { context.arguments.order_id like "ord-9*" };'
    )
    engine = _engine(text)
    numbers = range(880, 1000)
    answers = [
        decide_call(REFUND, _who("support"), ORGS, engine, {**_refund(1500), "order_id": f"ord-{n}"}, tainted=False)
        for n in numbers
    ]
    expected = [("nines-forbidden",) if str(n).startswith("9") else ("small-refunds-by-support",) for n in numbers]
    assert [answer.policy_ids for answer in answers] == expected
    assert len(engine.compiled.decisions) == 2


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


@pytest.mark.parametrize(
    "condition",
    [
        "context has tainted && context.arguments.amount_cents <= 500",
        "context has tainted || context.arguments.amount_cents <= 500",
        'context has tainted && context.arguments has order_id && context.arguments.reason == "damaged"',
    ],
)
def test_testing_that_the_taint_is_there_does_not_auto_approve_a_tainted_proposal(condition: str) -> None:
    """``context has tainted`` names the taint but does not constrain it: a tainted proposal it matches is allowed
    and waits for a person; the same proposal untainted is approved by the policy."""
    engine = _engine(
        '@id("names-the-taint") @approval("auto")\n'
        'permit (principal in Role::"support", action == Action::"orders_refund_create", resource)\n'
        f"when {{ {condition} }};"
    )
    tainted = decide_call(REFUND, _who("support"), ORGS, engine, _refund(400), tainted=True)
    assert tainted.decision.allowed and tainted.policy_ids == ("names-the-taint",)
    assert (tainted.approvals, tainted.auto_policy) == (None, None)
    clean = decide_call(REFUND, _who("support"), ORGS, engine, _refund(400), tainted=False)
    assert (clean.approvals, clean.auto_policy) == (AUTO, "names-the-taint")


@pytest.mark.parametrize(
    ("condition", "refuses_tainted"),
    [
        ('context.arguments == {"order_id": "ord_1001", "amount_cents": 1500, "reason": "damaged"}', False),
        (
            'context == {"arguments": context.arguments, "tainted": false} && context.arguments.amount_cents == 1500',
            True,
        ),
        ('context.arguments.reason == "damaged" && context.arguments has order_id && !context.tainted', True),
        ("context has tainted && context.arguments.amount_cents == 1500 && context has arguments", False),
    ],
)
def test_a_policy_is_handed_every_part_of_the_context_it_reads(condition: str, refuses_tainted: bool) -> None:
    """The engine hands Cedar only what the deciding policies read of the context: a policy reading all of it, or
    the arguments as one record, gets them whole; one reading some arguments and the taint gets those."""
    engine = _engine(f'permit (principal, action == Action::"orders_refund_create", resource) when {{ {condition} }};')
    answer = decide_call(REFUND, _who("clerk"), ORGS, engine, _refund(1500), tainted=False)
    assert answer.decision.allowed and answer.policy_ids == ("policy0",)
    tainted = decide_call(REFUND, _who("clerk"), ORGS, engine, _refund(1500), tainted=True)
    assert tainted.decision.allowed is not refuses_tainted
