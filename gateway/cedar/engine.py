"""The Cedar policy engine: a validated policy set, swapped atomically, deciding allow, deny or approval.

Who calls it: `policies.access.decide_access` and `decide_call` (through the `PolicyEngine`
Protocol), for the catalog and the executor; the composition root and ``countersign policy``
build it and load policy text into it. It asks nothing of the ledger: for a write, it only says
whether the call may be *proposed* and which approval the card needs; the executor files the card.

The three outcomes, from a policy set:

* a ``forbid`` that applies denies (Cedar: forbid overrides permit), and so does the absence of
  any ``permit`` that applies;
* for a read, a ``permit`` allows the call;
* for a write, a ``permit`` allows proposing, and the deciding permits' annotations set the card's
  approval: ``@approval("1")``, ``@approval("2")`` (the most any deciding permit asks for wins),
  ``@approver_role("finance")``, or ``@approval("auto")`` when a deciding permit says auto and none
  asks for a number of people; a permit without ``@approval`` leaves the tool's own approval.
  An auto approval never applies to a tainted proposal unless the auto policy's condition reads the value of
  ``context.tainted`` (its author decided what a tainted proposal gets); such a card waits for a
  person instead.

Policies are named by their ``@id("...")`` annotation (Cedar's own ``policyN`` otherwise); those
ids are what a decision reports, and what the audit entry records.

Cost: a call is put to Cedar with only the policies whose scope can match it (`CompiledPolicies.for_call`) and
only the part of the context they read; its answer is remembered by what of that context they can tell apart
(`Slice.key`: an argument they only compare with literals or match against literal ``like`` patterns, by its
answers to those comparisons and patterns, `gateway.cedar.like`), so a new amount or order id that answers them
as an earlier one did costs its key and a lookup (one to two microseconds) instead of a Cedar evaluation (30 to 50
at 100 policies; bench/policy_cost.py). An argument read any other way (arithmetic, a set, another argument) is
keyed by its value, so each new value of it is put to Cedar. A remembered answer is Cedar's own for that caller
and context (tests/cedar/test_engine.py checks it against Cedar over the whole set).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cedarpy
from cedarpy import _internal as extension

from gateway.cedar.authorize import authorize, context_text, entities
from gateway.cedar.like import Pattern, cedar_string
from gateway.cedar.schema import cedar_schema, context_of, entities_of
from gateway.codes import Code
from gateway.decision import Decision
from gateway.errors import ConfigError
from gateway.principal import Principal
from gateway.tools.declarations import Mode, Tool
from policies.engine import AUTO, PolicyAnswer

__all__ = ["Caller", "CedarEngine", "CompiledPolicies", "Slice", "compile_policies", "schema_digest"]

_APPROVALS = {"auto": AUTO, "1": 1, "2": 2, "3": 3}
_SLICES = 65_536
"""Slices (`Slice`) remembered per policy set before that memory starts over."""
_CALLERS = 16_384
"""Callers (`Caller`) remembered per policy set before that memory starts over: each holds its parsed entities."""
_DECISIONS = 8_192
"""Call answers remembered per policy set before that memory starts over (each holds its context's text)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CompiledPolicies:
    """One policy set, parsed and validated against the schema of the tools it was loaded with."""

    name: str
    """Where it came from and a digest of its text: what ``/readyz`` shows."""
    text: str
    policies: cedarpy.PolicySet
    ids: Mapping[str, str]
    """Cedar's ``policyN`` to the policy's ``@id`` (or ``policyN`` itself)."""
    annotations: Mapping[str, Mapping[str, str]]
    """Each policy's annotations, by its id."""
    reads_taint: frozenset[str]
    """The ids of the policies whose condition reads the value of ``context.tainted`` (`_reads_taint_value`)."""
    forbids: frozenset[str] = frozenset()
    """Cedar's ``policyN`` of every ``forbid``: one that cannot be evaluated denies (`CedarEngine.decide`)."""
    schema: str = ""
    """A digest of the schema the set was validated against: the tools served then, with their argument types."""
    static: Mapping[str, Any] = field(default_factory=dict)
    """The policies in Cedar's JSON form, by Cedar's ``policyN``."""
    callers: dict[tuple[Any, ...], Caller] = field(default_factory=dict)
    """What this set remembers of a principal calling a tool (`CedarEngine.decide`), by both."""
    slices: dict[tuple[Any, ...], Slice] = field(default_factory=dict)
    """For an action and a principal: the policies whose scope can match them (`for_call`)."""
    outcomes: dict[tuple[Any, ...], PolicyAnswer] = field(default_factory=dict)
    """Answers by Cedar's outcome (allowed, the deciding policies), the tool's mode and the taint (`_answer`)."""
    decisions: dict[tuple[Any, ...], PolicyAnswer] = field(default_factory=dict)
    """Call answers of this set, by caller (`Caller`), taint and the part of the context its policies read."""

    def for_call(self, action: str, principal: str, roles: frozenset[str]) -> Slice:
        """The policies that can apply to `principal` (holding `roles`) calling `action`, and what they read.

        Cedar evaluates every policy of the set it is given, so a call is decided over the policies whose
        scope can match it: an action scope naming this action, a group or any action, and a principal
        scope naming this principal, one of its roles, or anyone. A policy left out could not apply (its
        scope is false for this call), so the decision is the whole set's.
        """
        key = (action, principal, roles)
        found = self.slices.get(key)
        if found is None:
            kept = {
                cedar_id: body
                for cedar_id, body in self.static.items()
                if _may_match(body["action"], {("Action", action)})
                and _may_match(body["principal"], {("Principal", principal), *(("Role", role) for role in roles)})
            }
            text = json.dumps({"staticPolicies": kept, "templates": {}, "templateLinks": []})
            reads: set[str] | None = set()
            comparisons = _Comparisons()
            for body in kept.values():
                for condition in body.get("conditions", ()):
                    reads = _context_reads(condition.get("body"), reads)
                    comparisons.walk(condition.get("body"))
            arguments = frozenset(name for name in reads if name != _TAINTED) if reads is not None else None
            found = Slice(
                policies=cedarpy.PolicySet.from_json_str(text),
                arguments=arguments,
                tainted=reads is None or _TAINTED in reads,
                names=tuple(sorted(arguments or ())),
                classes=comparisons.classes(arguments or ()),
            )
            _remember(self.slices, key, found)
        return found


@dataclass(frozen=True, kw_only=True, slots=True)
class Slice:
    """The policies a call can match (`CompiledPolicies.for_call`), and what of the request context they read."""

    policies: cedarpy.PolicySet
    arguments: frozenset[str] | None
    """The arguments the policies read (``context.arguments.<name>``, or test with ``has``); None: they read the
    context in another way, and get all of it."""
    tainted: bool
    """Whether they read ``context.tainted``."""
    names: tuple[str, ...] = ()
    """`arguments` in one order (`key`)."""
    classes: Mapping[str, _Literals] = field(default_factory=dict)
    """For each argument the policies read only by comparing it with literals and matching it against literal
    ``like`` patterns (`_Comparisons`): those literals and patterns. Two values of it that answer every comparison
    and pattern alike are decided alike (`_argument_key`)."""

    def key(self, context: Mapping[str, Any]) -> tuple[Any, ...] | str:
        """What of a context (`context_of` over `arguments`) can tell two call answers apart: each argument's
        answers to the comparisons and patterns the policies apply to it (`classes`), else its value; the taint is
        keyed apart."""
        if self.arguments is None:
            return json.dumps(context)
        record = context["arguments"]
        return tuple(_argument_key(self.classes.get(name), record.get(name, _ABSENT)) for name in self.names)


class Caller:
    """What a policy set remembers of one principal calling one tool: the parsed entities, the policies that can
    apply, and the listing answer once asked. Hashed by identity: a remembered call answer is keyed by this
    object, so it can never be found for another caller."""

    __slots__ = ("entities", "listing", "parsed", "policies")

    def __init__(self, parsed: extension.Entities, policies: Slice) -> None:
        self.parsed = parsed
        """The entities as `authorize` takes them."""
        self.entities = cedarpy.Entities(parsed)
        """The same, as ``cedarpy``'s partial evaluation takes them."""
        self.policies = policies
        self.listing: PolicyAnswer | None = None


_ABSENT = object()
"""An argument the context does not hold (`Slice.key`)."""

_ORDERS = frozenset({"<", "<=", ">", ">="})
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
"""The comparisons `_Comparisons` classes values by; flipped: the same one with its operands swapped."""
_SCALARS = frozenset({str, int, bool, float})
"""Values that are their own key (`_argument_key`), with their type."""
_LONG = range(-(2**63), 2**63)
"""Cedar's Long: a value outside it is not compared as Python compares it (Cedar refuses it)."""


@dataclass(frozen=True, slots=True)
class _Literals:
    """The literals the policies compare one argument with (`_Comparisons`): what its key is made of."""

    cuts: tuple[int, ...]
    """The Long literals, sorted: a Long's answers to every comparison with them (``<``, ``<=``, ``>``, ``>=``,
    ``==``, ``!=``) follow from where it falls among them."""
    ordered: bool
    """Whether any comparison is an ordering one (which Cedar refuses for a value that is not a Long)."""
    others: frozenset[tuple[type, Any]]
    """The string and boolean literals compared for equality, with their types (Cedar's ``1 == true`` is false)."""
    patterns: tuple[Pattern, ...] = ()
    """The ``like`` patterns it is matched against (each once): a string's answers to them are part of its key;
    any other value is keyed by itself (``like`` on it is Cedar's type error)."""


_OTHER = ("other",)
"""The key of a string or boolean that equals none of the literals it is compared with."""


def _argument_key(literals: _Literals | None, value: Any) -> Any:
    """An argument's part of a call answer's key: where it falls among the literals it is compared with (a Long),
    which equality literal it is and which patterns it matches (a string), or (None, or a value Cedar would not
    compare or match) the value itself, typed. Two values with one key answer every comparison alike."""
    if value is _ABSENT:
        return None
    kind = type(value)
    if literals is not None:
        if kind is int:
            if value in _LONG and not literals.patterns:
                return (bisect_left(literals.cuts, value), bisect_right(literals.cuts, value))
        elif kind is str:
            if not literals.ordered and cedar_string(value):
                equal = (kind, value) if (kind, value) in literals.others else _OTHER
                if not literals.patterns:
                    return equal
                return (equal, *[pattern.matches(value) for pattern in literals.patterns])
        elif kind is bool and not literals.ordered and not literals.patterns:
            return (kind, value) if (kind, value) in literals.others else _OTHER
    if kind in _SCALARS:
        return (kind, value)  # typed: 1 and true are two values to Cedar
    return json.dumps(value)  # a record or a set, its fields in the schema's order (`context_of`)


class _Comparisons:
    """Which arguments the policies read only by comparing them with a literal (``context.arguments.x < 2000``,
    ``== "damaged"``, ``like "ord-9*"``, ``has x``), and those comparisons: two values of such an argument with the
    same answers to all of them are decided alike, so Cedar's answer for one is the answer for the other. An
    argument read any other way (an operand of ``+``, a set, another argument, a method) is decided by its value."""

    def __init__(self) -> None:
        self._found: dict[str, list[tuple[str, Any]]] = {}
        self._other: set[str] = set()

    def classes(self, names: Iterable[str]) -> dict[str, _Literals]:
        """The literals each of `names` is compared with, for those read only so."""
        found: dict[str, _Literals] = {}
        for name in names:
            if name in self._other:
                continue
            read = self._found.get(name, [])
            compared = [(operator, literal) for operator, literal in read if operator != "like"]
            found[name] = _Literals(
                cuts=tuple(sorted({literal for _operator, literal in compared if type(literal) is int})),
                ordered=any(operator in _ORDERS for operator, _literal in compared),
                others=frozenset(
                    (type(literal), literal) for _operator, literal in compared if type(literal) is not int
                ),
                patterns=tuple(dict.fromkeys(pattern for operator, pattern in read if operator == "like")),
            )
        return found

    def walk(self, node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                self.walk(item)
            return
        if not isinstance(node, dict):
            return
        for operator, operands in node.items():
            if operator == "like" and isinstance(operands, dict):
                name, pattern = _argument(operands.get("left")), Pattern.from_json(operands.get("pattern"))
                if name is not None and pattern is not None:
                    self._found.setdefault(name, []).append((operator, pattern))
                    continue
            if operator in _FLIPPED and isinstance(operands, dict) and operands.keys() == {"left", "right"}:
                left, right = operands["left"], operands["right"]
                for name, literal, used in ((_argument(left), right, operator), (_argument(right), left, None)):
                    used = used or _FLIPPED[operator]
                    if name is not None and _literal(literal, ordered=used in _ORDERS):
                        self._found.setdefault(name, []).append((used, literal["Value"]))
                        break
                else:
                    self.walk(operands)
                continue
            if operator == "has" and isinstance(operands, dict) and operands.get("left") == _ARGUMENTS:
                continue  # whether it is there: the key tells an absent argument apart
            name = _argument(node)
            if name is not None:
                self._other.add(name)
                return
            self.walk(operands)


_ARGUMENTS = {".": {"left": {"Var": "context"}, "attr": "arguments"}}


def _argument(node: Any) -> str | None:
    """The name `x` when `node` is ``context.arguments.x`` (Cedar's JSON form)."""
    if isinstance(node, dict) and len(node) == 1:
        access = node.get(".")
        if isinstance(access, dict) and access.get("left") == _ARGUMENTS:
            return str(access.get("attr"))
    return None


def _literal(node: Any, *, ordered: bool) -> bool:
    """Whether `node` is a literal a comparison can be answered for in Python as in Cedar: a Long (in range) for
    ``<`` and the like, a Long, a string or a boolean for ``==`` and ``!=``."""
    if not isinstance(node, dict) or node.keys() != {"Value"}:
        return False
    value = node["Value"]
    if ordered:
        return type(value) is int and value in _LONG
    return type(value) in (int, str, bool) and (type(value) is not int or value in _LONG)


_TAINTED = "\0tainted"
"""`_context_reads`'s name for ``context.tainted`` (not an argument name: none holds a NUL)."""


def _context_reads(node: Any, reads: set[str] | None) -> set[str] | None:
    """The arguments a policy condition (Cedar's JSON form) reads from the context, added to `reads`; None when it
    reads the context otherwise than ``context.arguments.<name>``, ``context.tainted`` or ``has`` of them."""
    if reads is None:
        return None
    if isinstance(node, list):
        for item in node:
            reads = _context_reads(item, reads)
        return reads
    if not isinstance(node, dict):
        return reads
    if node.get("Var") == "context":
        return None  # the context itself, beyond the forms below: it is passed whole
    for operator in (".", "has"):
        access = node.get(operator)
        if isinstance(access, dict) and "left" in access and "attr" in access:
            left, attr = access["left"], access["attr"]
            if left == {"Var": "context"} and (attr == "tainted" or (attr, operator) == ("arguments", "has")):
                if attr == "tainted":
                    reads.add(_TAINTED)
                return reads  # ``context has arguments``: every call's context has its arguments
            if isinstance(left, dict) and left.get(".") == {"left": {"Var": "context"}, "attr": "arguments"}:
                reads.add(str(attr))
                return reads
    for value in node.values():
        reads = _context_reads(value, reads)
    return reads


_TAINT_VALUE = {"left": {"Var": "context"}, "attr": "tainted"}
"""``context.tainted`` in Cedar's JSON form, under ``"."`` (a read of the value) or ``"has"`` (a test it is there)."""


def _reads_taint_value(node: Any) -> bool:
    """Whether a policy's conditions (Cedar's JSON form) read the value of ``context.tainted``.

    Only a read of the value can make a condition's outcome turn on the taint, which is what an auto approval of a
    tainted proposal requires (the author decided what a tainted proposal gets). ``context has tainted`` does not
    count: it only tests that the field is there, which says nothing about a tainted proposal (and the context
    handed to a policy that names the taint always holds it)."""
    if isinstance(node, list):
        return any(_reads_taint_value(item) for item in node)
    if not isinstance(node, dict):
        return False
    if node.get(".") == _TAINT_VALUE:
        return True
    return any(_reads_taint_value(value) for value in node.values())


def compile_policies(text: str, tools: Iterable[Tool], *, source: str) -> CompiledPolicies:
    """`text` parsed and validated against the schema generated from `tools`.

    Raises:
        ConfigError: the text does not parse, two policies share an id, an annotation is not one this
            engine knows, or Cedar's validator refuses a policy (its messages, with the policy's id).
    """
    try:
        policies = cedarpy.PolicySet.from_str(text)
        parsed = json.loads(cedarpy.policies_to_json_str(text))
    except ValueError as error:
        raise ConfigError(f"policy set {source} does not parse: {error}") from error
    ids: dict[str, str] = {}
    annotations: dict[str, Mapping[str, str]] = {}
    reads_taint: set[str] = set()
    forbids: set[str] = set()
    for cedar_id, body in parsed.get("staticPolicies", {}).items():
        if body.get("effect") == "forbid":
            forbids.add(cedar_id)
        notes = dict(body.get("annotations") or {})
        policy_id = notes.get("id") or cedar_id
        if policy_id in annotations:
            raise ConfigError(f"policy set {source}: two policies have the id {policy_id!r}")
        if "approval" in notes and notes["approval"] not in _APPROVALS:
            raise ConfigError(f"policy {policy_id}: @approval must be one of {sorted(_APPROVALS)}")
        ids[cedar_id] = policy_id
        annotations[policy_id] = notes
        if _reads_taint_value(body.get("conditions", [])):
            reads_taint.add(policy_id)
    schema = cedar_schema(tools)
    result = cedarpy.validate_policies(text, schema)
    if not result.validation_passed:
        messages = "; ".join(f"{ids.get(error.policy_id, error.policy_id)}: {error.error}" for error in result.errors)
        raise ConfigError(f"policy set {source} does not validate: {messages}")
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return CompiledPolicies(
        name=f"{source}@sha256:{digest}",
        text=text,
        policies=policies,
        ids=ids,
        annotations=annotations,
        reads_taint=frozenset(reads_taint),
        forbids=frozenset(forbids),
        schema=schema_digest(schema),
        static=parsed.get("staticPolicies", {}),
    )


def schema_digest(schema: Mapping[str, Any]) -> str:
    """A digest of a Cedar schema (`cedar_schema`): equal exactly when the tools and their types are."""
    return hashlib.sha256(json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class CedarEngine:
    """The `policies.engine.PolicyEngine` on Cedar. `load` swaps the whole set or nothing."""

    def __init__(self, compiled: CompiledPolicies) -> None:
        self._compiled = compiled
        self._lock = threading.Lock()

    @property
    def active(self) -> str:
        return self._compiled.name

    @property
    def compiled(self) -> CompiledPolicies:
        return self._compiled

    def load(self, text: str, tools: Iterable[Tool], *, source: str) -> CompiledPolicies:
        """Validate `text` and put it in force; on any error raise and keep the set in force.

        Raises:
            ConfigError: as `compile_policies`; the previous set stays in force.
        """
        compiled = compile_policies(text, tools, source=source)
        with self._lock:
            self._compiled = compiled  # one reference swap: a decision sees the old set or the new one
        return compiled

    def decide(
        self, tool: Tool, principal: Principal, arguments: Mapping[str, Any] | None, *, tainted: bool
    ) -> PolicyAnswer:
        compiled = self._compiled
        key = (principal, tool.name, tool.adapter, tool.mode)
        caller = compiled.callers.get(key)
        if caller is None:
            principal_id = principal.key_id or principal.subject
            caller = Caller(
                entities(json.dumps(entities_of(tool, principal))),
                compiled.for_call(tool.name, principal_id, principal.roles),
            )
            _remember(compiled.callers, key, caller, limit=_CALLERS)
        if arguments is None:
            # The listing answer is a pure function of the set, the principal and the tool's entity: remembered
            # per set (a new set starts afresh), as partial evaluation costs far more than a full one.
            if caller.listing is None:
                caller.listing = self._listing(compiled, tool, principal, caller)
            return caller.listing
        policies = caller.policies
        # Only the part of the context the policies read is built and handed over: Cedar's cost grows with the
        # context it parses, and a policy cannot tell the parts it does not read.
        context = context_of(tool, arguments, tainted=tainted, only=policies.arguments, with_taint=policies.tainted)
        # A call answer is a pure function of the set, the entities and that context (no clock, no state):
        # remembered, with the taint, which decides an auto approval whether or not a policy reads it, by what of
        # the context the policies can tell apart (an amount they only compare with 2000 and 50000: which side
        # of each it is on).
        remembered = (caller, tainted, policies.key(context))
        answer = compiled.decisions.get(remembered)
        if answer is None:
            answer = self._call(compiled, tool, principal, caller, context_text(context), tainted=tainted)
            _remember(compiled.decisions, remembered, answer, limit=_DECISIONS)
        return answer

    def _call(
        self, compiled: CompiledPolicies, tool: Tool, who: Principal, caller: Caller, context: str, *, tainted: bool
    ) -> PolicyAnswer:
        request = {
            "principal": {"type": "Principal", "id": who.key_id or who.subject},
            "action": {"type": "Action", "id": tool.name},
            "resource": {"type": "Tool", "id": tool.name},
            "context": context,
        }
        result = authorize(request, caller.policies.policies, caller.parsed)
        if result.errors:
            # Cedar skips a policy it cannot evaluate; for a forbid that would open what it closes (a set kept in
            # force after the catalog changed under it, an overflow): the call is refused in its name instead.
            broken = _ids(compiled, _erring(result.errors) & compiled.forbids)
            if broken:
                reason = f"policy {', '.join(broken)} cannot be evaluated for this call"
                return PolicyAnswer(decision=Decision.deny(Code.PERMISSION_DENIED, reason), policy_ids=broken)
        # The answer follows from Cedar's outcome and the deciding policies alone: remembered by them.
        outcome = (result.allowed, result.reasons, tool.mode, tainted)
        answer = compiled.outcomes.get(outcome)
        if answer is None:
            answer = _answer(compiled, *outcome)
            _remember(compiled.outcomes, outcome, answer, limit=_DECISIONS)
        return answer

    def _listing(self, compiled: CompiledPolicies, tool: Tool, principal: Principal, caller: Caller) -> PolicyAnswer:
        # Listing: the context is unknown. Cedar's partial evaluation answers Deny only when no
        # context could make the call allowed, which is exactly when the tool is hidden.
        # (Partial evaluation takes the surface syntax only: the ids are quoted as Cedar strings.)
        surface = {
            "principal": f"Principal::{json.dumps(principal.key_id or principal.subject)}",
            "action": f"Action::{json.dumps(tool.name)}",
            "resource": f"Tool::{json.dumps(tool.name)}",
        }
        partial = cedarpy.is_authorized_partial(surface, caller.policies.policies, caller.entities)
        return _listing_answer(compiled, partial)


def _may_match(scope: Mapping[str, Any], entities: set[tuple[str, str]]) -> bool:
    """Whether a policy's principal or action scope can hold for a request naming one of `entities`
    directly (``==``, or ``in`` one of them); any other scope (all, a set, ``is``) is kept."""
    if scope.get("op") not in ("==", "in") or "entity" not in scope:
        return True
    entity = scope["entity"]
    if scope["op"] == "in" and entity.get("type") == "Action":
        return True  # an action group: the hierarchy is the entities', kept whole
    return (entity.get("type"), entity.get("id")) in entities


def _remember(memory: dict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any, *, limit: int = _SLICES) -> None:
    if len(memory) >= limit:
        memory.clear()  # a bounded memory: past its size it starts over
    memory[key] = value


def _listing_answer(compiled: CompiledPolicies, partial: cedarpy.PartialAuthzResult) -> PolicyAnswer:
    """The listing verdict from Cedar's residual policies: hidden when a forbid holds whatever the context
    is, or when no permit could hold for any context; otherwise listed."""
    if partial.decision == cedarpy.Decision.Deny and not partial.residuals:
        return PolicyAnswer(decision=_denied(()))
    forbidding: list[str] = []
    may_permit = partial.decision == cedarpy.Decision.Allow
    for cedar_id, residual in (partial.residuals or {}).items():
        bodies = [condition.get("body") for condition in residual.get("conditions", [])]
        if residual.get("effect") == "forbid" and all(body == {"Value": True} for body in bodies):
            forbidding.append(compiled.ids.get(cedar_id, cedar_id))
        elif residual.get("effect") == "permit" and not any(body == {"Value": False} for body in bodies):
            may_permit = True
    if forbidding:
        ids = tuple(sorted(forbidding))
        return PolicyAnswer(decision=_denied(ids), policy_ids=ids)
    if not may_permit:
        return PolicyAnswer(decision=_denied(()))
    return PolicyAnswer(decision=Decision.allow("a policy may permit it"))


_ERRING = re.compile(r"policy `([^`]+)`")


def _erring(errors: Iterable[str]) -> set[str]:
    """Cedar's ``policyN`` of each policy its evaluation errors name."""
    return {found.group(1) for error in errors if (found := _ERRING.search(error))}


def _answer(
    compiled: CompiledPolicies, allowed: bool, reasons: tuple[str, ...], mode: Mode, tainted: bool
) -> PolicyAnswer:
    """The answer for Cedar's outcome: denied, or allowed, with the deciding permits' approval for a write."""
    ids = _ids(compiled, reasons)
    if not allowed:
        return PolicyAnswer(decision=_denied(ids), policy_ids=ids)
    decision = Decision.allow(f"policy {', '.join(ids)}")
    if mode is Mode.READ:
        return PolicyAnswer(decision=decision, policy_ids=ids)
    return _approval(compiled, ids, decision, tainted=tainted)


def _ids(compiled: CompiledPolicies, reasons: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(compiled.ids.get(reason, reason) for reason in reasons))


def _denied(ids: tuple[str, ...]) -> Decision:
    if ids:
        return Decision.deny(Code.PERMISSION_DENIED, f"forbidden by policy {', '.join(ids)}")
    return Decision.deny(Code.PERMISSION_DENIED, "no policy permits it")


def _approval(compiled: CompiledPolicies, ids: tuple[str, ...], allowed: Decision, *, tainted: bool) -> PolicyAnswer:
    """The approval a write's card needs, from the annotations of the permits that allowed it."""
    notes = [compiled.annotations.get(policy_id, {}) for policy_id in ids]
    asked = [_APPROVALS[note["approval"]] for note in notes if "approval" in note]
    roles = sorted({note["approver_role"] for note in notes if "approver_role" in note})
    role = roles[0] if roles else None
    if asked and all(count == AUTO for count in asked):
        auto = [policy_id for policy_id in ids if not tainted or policy_id in compiled.reads_taint]
        if auto:
            return PolicyAnswer(
                decision=allowed, policy_ids=ids, approvals=AUTO, approver_role=role, auto_policy=auto[0]
            )
        return PolicyAnswer(decision=allowed, policy_ids=ids, approvals=None, approver_role=role)
    counted = [count for count in asked if count != AUTO]
    most = max(counted) if counted else None
    return PolicyAnswer(decision=allowed, policy_ids=ids, approvals=most, approver_role=role)
