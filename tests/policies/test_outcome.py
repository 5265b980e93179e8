"""The outcome policy: what an attempt at a write means, and what to do about an uncertain one.

Tables of verdicts over `classify`, `reconcile_step` and `backoff_ms`, and the invariant behind
them as a property: anything that may have reached the backend is UNKNOWN, never NOT_SENT or
FAILED (ARCHITECTURE.md, invariant 5).
"""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import errors
from gateway.errors import (
    ToolDeclarationError,
    UpstreamError,
    UpstreamNotFoundError,
    UpstreamProtocolError,
    UpstreamRateLimitedError,
    UpstreamRefusedError,
    UpstreamTimeoutError,
    UpstreamUnavailableError,
)
from gateway.tools.context import ToolContext
from gateway.tools.declarations import WriteContract, WriteStatus
from policies.outcome import Attempt, Next, ReconcileStep, backoff_ms, classify, reconcile_step, retry_delay_ms
from tests.support.examples import examples


async def _never_called(key: str, ctx: ToolContext) -> WriteStatus:
    raise AssertionError("a policy never looks anything up")


def _contract(*, dedupes: bool, not_applied: frozenset[int] = frozenset({400, 404, 409, 422})) -> WriteContract:
    return WriteContract(
        dedupes_on_key=dedupes,
        key_retention_seconds=100.0,
        status_lookup=_never_called,
        reference_field="booking_id",
        not_applied_statuses=not_applied,
        settle_seconds=2.0,
    )


KEYED = _contract(dedupes=True)
UNKEYED = _contract(dedupes=False)
CONTRACTS = pytest.mark.parametrize("contract", [KEYED, UNKEYED], ids=["dedupes", "no-dedupe"])
EITHER_SEND = pytest.mark.parametrize("resend", [False, True], ids=["first-send", "resend"])

# Every UpstreamError class the gateway defines, found rather than listed, so a new one is covered. A 429
# (`UpstreamRateLimitedError`) is the one sent answer that proves "not applied" whatever the contract
# says: it has its own cases below.
UPSTREAM_ERRORS: tuple[type[UpstreamError], ...] = tuple(
    value
    for _, value in inspect.getmembers(errors, inspect.isclass)
    if issubclass(value, UpstreamError) and value is not UpstreamRateLimitedError
)
STATUSES: tuple[int | None, ...] = (None, *range(100, 600))


def _sent(cls: type[UpstreamError], status: int | None) -> UpstreamError:
    """An error of `cls` for a request that left the gateway (`UpstreamRefusedError` always has)."""
    if cls is UpstreamRefusedError:
        return UpstreamRefusedError("refused", service="rooms", status=status)
    return cls("failed", service="rooms", status=status, sent=True)


# What the adapters raise in each phase of a send (gateway/tools/backend_http.py, gateway/outbound/backend_client.py,
# and the executor's deadline and output check).
NOT_SENT_CASES = [
    pytest.param(UpstreamUnavailableError("cannot connect", service="rooms", sent=False), id="connect-refused"),
    pytest.param(UpstreamUnavailableError("connect timed out", service="rooms", sent=False), id="connect-timeout"),
    pytest.param(UpstreamUnavailableError("no client for this backend", service="rooms", sent=False), id="no-client"),
]
REFUSED_CASES = [
    pytest.param(UpstreamRefusedError("refused", service="rooms", status=409, reason="slot_taken"), id="409"),
    pytest.param(UpstreamRefusedError("refused", service="rooms", status=422), id="422"),
    pytest.param(UpstreamProtocolError("backend answered 400", service="rooms", status=400), id="400"),
    pytest.param(UpstreamNotFoundError("not found", service="rooms", status=404), id="404"),
]
MAY_HAVE_LANDED_CASES = [
    pytest.param(UpstreamProtocolError("backend answered 500", service="rooms", status=500), id="500"),
    pytest.param(UpstreamUnavailableError("backend answered 502", service="rooms", status=502), id="502"),
    pytest.param(UpstreamUnavailableError("backend answered 503", service="rooms", status=503), id="503"),
    pytest.param(UpstreamUnavailableError("backend answered 504", service="rooms", status=504), id="504"),
    pytest.param(UpstreamTimeoutError("no answer in time", service="rooms"), id="timeout-after-send"),
    pytest.param(UpstreamUnavailableError("connection failed", service="rooms"), id="dropped-connection"),
    pytest.param(UpstreamProtocolError("2xx answer is not JSON", service="rooms", status=200), id="200-not-json"),
    pytest.param(UpstreamProtocolError("failed output check", service="rooms", status=200), id="200-bad-shape"),
    pytest.param(UpstreamProtocolError("backend answered 302", service="rooms", status=302), id="302"),
    pytest.param(UpstreamRefusedError("refused without a status", service="rooms"), id="refusal-no-status"),
]


# -- classify: one table per send phase --------------------------------------------------------------


@CONTRACTS
@EITHER_SEND
def test_confirmed_write_succeeded(contract: WriteContract, resend: bool) -> None:
    """No error means the backend answered 2xx with an output that passed its check."""
    assert classify(None, contract, resend=resend) is Attempt.SUCCEEDED


@CONTRACTS
@EITHER_SEND
@pytest.mark.parametrize("error", NOT_SENT_CASES)
def test_request_that_never_left_is_not_sent(error: UpstreamError, contract: WriteContract, resend: bool) -> None:
    """An error whose request certainly never left the gateway is NOT_SENT: retried with the same key,
    whether or not the backend dedupes, because nothing reached it (for a resend: nothing this time)."""
    assert classify(error, contract, resend=resend) is Attempt.NOT_SENT


@CONTRACTS
@pytest.mark.parametrize("error", REFUSED_CASES)
def test_definitive_refusal_of_a_first_send_failed(error: UpstreamError, contract: WriteContract) -> None:
    """A status the contract calls "not applied" is FAILED, whichever error class carried it, when it
    answers the first request ever sent with the card's key."""
    assert classify(error, contract, resend=False) is Attempt.FAILED


@CONTRACTS
@pytest.mark.parametrize("error", REFUSED_CASES)
def test_refusal_of_a_resend_is_unknown(error: UpstreamError, contract: WriteContract) -> None:
    """A resend's refusal answers that request only: the first send with the same key may still be in
    flight or may have landed (a backend may well answer 409 to a key in use). So it is UNKNOWN, and
    only the backend's record, through a status query, can make the card FAILED."""
    assert classify(error, contract, resend=True) is Attempt.UNKNOWN


@CONTRACTS
@EITHER_SEND
@pytest.mark.parametrize("error", MAY_HAVE_LANDED_CASES)
def test_answer_that_may_have_landed_is_unknown(error: UpstreamError, contract: WriteContract, resend: bool) -> None:
    """A 5xx, a timeout after sending, a dropped connection, a 2xx we cannot read, a refusal
    without a status: the write may have landed, so it is UNKNOWN and goes to a status query."""
    assert classify(error, contract, resend=resend) is Attempt.UNKNOWN


@CONTRACTS
@EITHER_SEND
def test_a_429_is_not_applied_and_released_with_its_key(contract: WriteContract, resend: bool) -> None:
    """A 429 says the backend did not process the request (RFC 6585), whatever the contract lists: the
    card is released with its key (a first send to APPROVED, a resend to UNKNOWN), never FAILED, and
    no status query is needed to know the write did not land."""
    throttled = UpstreamRateLimitedError("backend answered 429", service="rooms", retry_after=7.0)
    assert classify(throttled, contract, resend=resend) is Attempt.NOT_SENT


@CONTRACTS
@EITHER_SEND
def test_a_401_is_not_processed_and_released_with_its_key(contract: WriteContract, resend: bool) -> None:
    """A 401 says the backend did not take the gateway's own credentials, so it processed nothing: released
    with its key to be sent again with what the gateway sends then, never FAILED by default; a contract that
    names 401 as "not applied" has a first send FAILED."""
    unauthenticated = UpstreamRefusedError("backend answered 401", service="rooms", status=401)
    assert classify(unauthenticated, contract, resend=resend) is Attempt.NOT_SENT
    strict = replace(contract, not_applied_statuses=contract.not_applied_statuses | {401})
    assert classify(unauthenticated, strict, resend=resend) is (Attempt.UNKNOWN if resend else Attempt.FAILED)


@pytest.mark.parametrize(
    ("error", "attempts", "delay_ms"),
    [
        (UpstreamRateLimitedError("429", service="rooms", retry_after=7.0), 0, 7_000),
        (UpstreamRateLimitedError("429", service="rooms", retry_after=0.0), 3, backoff_ms(3)),
        (UpstreamUnavailableError("cannot connect", service="rooms", sent=False), 2, backoff_ms(2)),
        (None, 1, backoff_ms(1)),
    ],
)
def test_a_released_write_waits_for_the_backoff_or_the_backends_retry_after(
    error: UpstreamError | None, attempts: int, delay_ms: int
) -> None:
    """The wait before the next send is the longer of the backoff and the backend's Retry-After."""
    assert retry_delay_ms(error, attempts) == delay_ms


@pytest.mark.parametrize(("status", "attempt"), [(409, Attempt.FAILED), (422, Attempt.UNKNOWN), (404, Attempt.UNKNOWN)])
def test_only_the_contracts_own_statuses_mean_not_applied(status: int, attempt: Attempt) -> None:
    """The contract, not the adapter's error class, says which statuses prove "not applied": a 422
    refusal from a backend that only promises it for 409 may still have landed."""
    narrow = _contract(dedupes=True, not_applied=frozenset({409}))
    refusal = UpstreamRefusedError("refused", service="rooms", status=status)
    assert classify(refusal, narrow, resend=False) is attempt


# -- classify: the invariant as a property ---------------------------------------------------------


def test_every_upstream_error_class_is_covered() -> None:
    """The sweep below iterates over the real error tree, not an empty or partial list."""
    assert {UpstreamError, UpstreamTimeoutError, UpstreamUnavailableError, UpstreamProtocolError} <= set(
        UPSTREAM_ERRORS
    )
    assert {UpstreamNotFoundError, UpstreamRefusedError} <= set(UPSTREAM_ERRORS)


@CONTRACTS
@EITHER_SEND
@pytest.mark.parametrize("cls", UPSTREAM_ERRORS, ids=lambda cls: cls.__name__)
def test_sent_error_outside_not_applied_is_always_unknown(
    cls: type[UpstreamError], contract: WriteContract, resend: bool
) -> None:
    """For every error class and every status (or none) the contract does not call "not applied", a
    sent request is UNKNOWN, but a 401 (the gateway's credentials not taken: nothing processed), which is
    NOT_SENT; every status it does call so is FAILED for a first send and UNKNOWN for a resend."""
    for status in STATUSES:
        assert classify(_sent(cls, status), contract, resend=resend) is _expected(status, contract, resend), (
            cls.__name__,
            status,
        )


def _expected(status: int | None, contract: WriteContract, resend: bool) -> Attempt:
    """The invariant of `classify` for a sent request that raised, as the two tests below state it."""
    if status in contract.not_applied_statuses:
        return Attempt.UNKNOWN if resend else Attempt.FAILED
    return Attempt.NOT_SENT if status == 401 else Attempt.UNKNOWN


@settings(database=None, deadline=None, max_examples=examples(300))
@given(
    cls=st.sampled_from(UPSTREAM_ERRORS),
    status=st.none() | st.integers(min_value=100, max_value=599),
    not_applied=st.frozensets(st.integers(min_value=100, max_value=499)),
    dedupes=st.booleans(),
    resend=st.booleans(),
)
def test_sent_error_is_unknown_for_any_contract(
    cls: type[UpstreamError], status: int | None, not_applied: frozenset[int], dedupes: bool, resend: bool
) -> None:
    """Whatever statuses a contract declares, a sent request is FAILED exactly when it is a first send
    and its status is one of them, NOT_SENT when it is a 401 the contract does not list, and UNKNOWN
    otherwise: never FAILED on a status the contract omits, and a resend never FAILED at all."""
    contract = _contract(dedupes=dedupes, not_applied=not_applied)
    assert classify(_sent(cls, status), contract, resend=resend) is _expected(status, contract, resend)


# -- reconcile_step ------------------------------------------------------------------------------------

DISPATCHED = 1_000_000
SETTLED = DISPATCHED + 2_000  # settle_seconds=2.0
REMEMBERED = DISPATCHED + 90_000  # 90% of key_retention_seconds=100.0: the margin
FORGOTTEN = DISPATCHED + 100_000
DAY = 24 * 3600 * 1000
"""The default reconciliation horizon (`gateway.config.settings.Settings.reconcile_horizon_seconds`)."""
EXECUTE_BY = DISPATCHED + 365 * DAY
"""An execute_by no case here reaches, unless it says otherwise."""

APPLIED = WriteStatus(state="applied", reference="bk_1")
REFUSED = WriteStatus(state="refused")
NO_RECORD = WriteStatus(state="unknown")


def _step(
    status: WriteStatus | None,
    contract: WriteContract,
    *,
    now_ms: int,
    first_ms: int = DISPATCHED,
    last_ms: int = DISPATCHED,
    execute_by_ms: int = EXECUTE_BY,
    horizon_ms: int = DAY,
    sends: int = 1,
) -> ReconcileStep:
    """`reconcile_step` for a write first sent at `first_ms` and last at `last_ms` (both DISPATCHED unless
    said), whose execute_by is far off unless said."""
    return reconcile_step(
        status,
        contract,
        now_ms=now_ms,
        first_dispatched_ms=first_ms,
        dispatched_ms=last_ms,
        execute_by_ms=execute_by_ms,
        horizon_ms=horizon_ms,
        sends=sends,
    )


NOW_CASES = pytest.mark.parametrize(
    "now_ms",
    [DISPATCHED, SETTLED - 1, SETTLED, REMEMBERED - 1, REMEMBERED, FORGOTTEN, FORGOTTEN * 10],
    ids=["at-send", "settling", "settled", "remembered", "margin", "forgotten", "long-after"],
)


@CONTRACTS
@NOW_CASES
@pytest.mark.parametrize(("status", "expected"), [(APPLIED, Next.SUCCEEDED), (REFUSED, Next.FAILED)])
def test_backend_record_settles_the_write(
    status: WriteStatus, expected: Next, contract: WriteContract, now_ms: int
) -> None:
    """A record of the key is the backend's own account of the write, so it decides at any time, in
    either direction, whether or not the backend dedupes."""
    step = _step(status, contract, now_ms=now_ms)
    assert step.next is expected


@CONTRACTS
@pytest.mark.parametrize(
    ("now_ms", "at_ms"),
    [
        (DISPATCHED, DISPATCHED + 500),
        (DISPATCHED + 4_000, DISPATCHED + 6_000),
        (FORGOTTEN, FORGOTTEN + 50_000),
        (FORGOTTEN * 10, FORGOTTEN * 10 + 60_000),
        (DISPATCHED - 5_000, DISPATCHED - 4_500),
    ],
    ids=["at-send", "half-the-wait", "forgotten", "capped", "clock-behind"],
)
def test_failed_status_query_asks_again_later(now_ms: int, at_ms: int, contract: WriteContract) -> None:
    """No answer to the status query proves nothing, so the card stays UNKNOWN and is asked again
    after half the time already waited (0.5 s .. 60 s); it is never resent on no information."""
    step = _step(None, contract, now_ms=now_ms)
    assert (step.next, step.at_ms) == (Next.RESCHEDULE, at_ms)


@CONTRACTS
@pytest.mark.parametrize("now_ms", [DISPATCHED, SETTLED - 1], ids=["at-send", "settling"])
def test_no_record_within_settle_period_asks_again_when_it_ends(now_ms: int, contract: WriteContract) -> None:
    """Shortly after a send the backend may not show a write that did land, so "no record" then is
    not evidence: ask again when the settle period is over."""
    step = _step(NO_RECORD, contract, now_ms=now_ms)
    assert (step.next, step.at_ms) == (Next.RESCHEDULE, SETTLED)


@pytest.mark.parametrize(
    ("contract", "now_ms", "expected"),
    [
        (KEYED, SETTLED, Next.RESEND),
        (KEYED, REMEMBERED - 1, Next.RESEND),
        (KEYED, REMEMBERED, Next.NEEDS_RECONCILIATION),
        (KEYED, FORGOTTEN, Next.NEEDS_RECONCILIATION),
        (UNKEYED, SETTLED, Next.NEEDS_RECONCILIATION),
        (UNKEYED, REMEMBERED - 1, Next.NEEDS_RECONCILIATION),
        (UNKEYED, FORGOTTEN, Next.NEEDS_RECONCILIATION),
    ],
    ids=[
        "keyed-settled",
        "keyed-remembered",
        "keyed-margin",
        "keyed-forgotten",
        "unkeyed-settled",
        "unkeyed-remembered",
        "unkeyed-forgotten",
    ],
)
def test_no_record_after_settling_resends_only_while_the_key_dedupes(
    contract: WriteContract, now_ms: int, expected: Next
) -> None:
    """A settled "no record" means the write did not land; a resend with the same key is then safe only
    while the backend would still dedupe it (within 90% of its retention). Otherwise a person decides."""
    step = _step(NO_RECORD, contract, now_ms=now_ms)
    assert step.next is expected
    assert step.reason


@pytest.mark.parametrize(
    "status", [None, APPLIED, REFUSED, NO_RECORD], ids=["no-answer", "applied", "refused", "no-record"]
)
@CONTRACTS
def test_resend_needs_a_settled_no_record_from_a_deduping_backend(
    status: WriteStatus | None, contract: WriteContract
) -> None:
    """Invariant 5 for the reconciler: over a sweep of times, RESEND comes only from the backend's
    settled "no record" of the key, for a backend that dedupes on it, before it may have forgotten it."""
    for now_ms in range(DISPATCHED - 10_000, FORGOTTEN + 10_000, 500):
        step = _step(status, contract, now_ms=now_ms)
        safe = status is NO_RECORD and contract.dedupes_on_key and SETTLED <= now_ms < REMEMBERED
        assert (step.next is Next.RESEND) is safe, now_ms


@pytest.mark.parametrize("resent_before_ms", [5_000, 60_000, 89_000], ids=["5s", "60s", "89s"])
def test_a_resend_does_not_extend_how_long_the_first_sends_key_is_remembered(resent_before_ms: int) -> None:
    """The backend may have applied the first send and remembered its key from then: a resend found
    nothing because that record is gone is a second write. So "still remembered" counts from the first
    send, and a later resend never pushes it out (the margin is 90% of the retention)."""
    step = _step(NO_RECORD, KEYED, now_ms=REMEMBERED, last_ms=REMEMBERED - resent_before_ms)
    assert step.next is Next.NEEDS_RECONCILIATION


@settings(database=None, deadline=None, max_examples=examples(400))
@given(
    since_first_ms=st.integers(min_value=0, max_value=300_000),
    since_last_ms=st.integers(min_value=0, max_value=300_000),
)
def test_resend_only_while_the_first_sends_key_is_remembered(since_first_ms: int, since_last_ms: int) -> None:
    """For any first and latest send, RESEND comes only before 90% of the retention since the first one."""
    now_ms = DISPATCHED + since_first_ms
    last_ms = now_ms - min(since_last_ms, since_first_ms)
    step = _step(NO_RECORD, KEYED, now_ms=now_ms, last_ms=last_ms)
    if step.next is Next.RESEND:
        assert now_ms < REMEMBERED and now_ms >= last_ms + 2_000


@pytest.mark.parametrize(
    ("execute_by_ms", "expected"),
    [(SETTLED + 1, Next.RESEND), (SETTLED, Next.NEEDS_RECONCILIATION), (DISPATCHED + 1_000, Next.NEEDS_RECONCILIATION)],
    ids=["before-execute-by", "at-execute-by", "long-past"],
)
def test_no_resend_starts_at_or_after_execute_by(execute_by_ms: int, expected: Next) -> None:
    """Where a resend would be safe, it still goes out only before the card's execute_by: past it the
    write would be sent late, so a person decides, and the reason says why."""
    step = _step(NO_RECORD, KEYED, now_ms=SETTLED, execute_by_ms=execute_by_ms)
    assert step.next is expected
    if expected is Next.NEEDS_RECONCILIATION:
        assert "execute_by" in step.reason


@settings(database=None, deadline=None, max_examples=examples(400))
@given(
    status=st.sampled_from([None, APPLIED, REFUSED, NO_RECORD]),
    dedupes=st.booleans(),
    since_first_ms=st.integers(min_value=0, max_value=200_000),
    execute_by_after_first_ms=st.integers(min_value=-10_000, max_value=200_000),
)
def test_a_resend_is_never_late(
    status: WriteStatus | None, dedupes: bool, since_first_ms: int, execute_by_after_first_ms: int
) -> None:
    """For any status, contract, time and execute_by, RESEND comes only strictly before execute_by."""
    now_ms = DISPATCHED + since_first_ms
    execute_by_ms = DISPATCHED + execute_by_after_first_ms
    step = _step(status, _contract(dedupes=dedupes), now_ms=now_ms, execute_by_ms=execute_by_ms)
    assert step.next is not Next.RESEND or now_ms < execute_by_ms


# -- backoff_ms --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempts", "delay"),
    [(-3, 500), (0, 500), (1, 1_000), (2, 2_000), (6, 32_000), (7, 60_000), (16, 60_000), (10**6, 60_000)],
)
def test_backoff_doubles_from_the_base_up_to_the_cap(attempts: int, delay: int) -> None:
    """Each attempt doubles the delay from 0.5 s until the 60 s cap; a negative count is the first try."""
    assert backoff_ms(attempts) == delay


@pytest.mark.parametrize(("base_ms", "cap_ms"), [(500, 60_000), (1, 10), (250, 250), (0, 1_000), (7_000, 5_000)])
def test_backoff_never_shrinks_never_exceeds_the_cap_and_is_never_negative(base_ms: int, cap_ms: int) -> None:
    """Over any number of attempts the delay is non-decreasing, within 0 .. cap, and reaches the cap
    whenever the base is positive."""
    delays = [backoff_ms(attempts, base_ms=base_ms, cap_ms=cap_ms) for attempts in range(-5, 100)]
    assert delays == sorted(delays)
    assert all(0 <= delay <= cap_ms for delay in delays)
    assert delays[-1] == (cap_ms if base_ms > 0 else 0)


# -- the reconciliation horizon -------------------------------------------------------------------


@CONTRACTS
@pytest.mark.parametrize("status", [None, NO_RECORD], ids=["no-answer", "no-record"])
@pytest.mark.parametrize("late_ms", [DAY, DAY + 1, 7 * DAY], ids=["at-horizon", "past-horizon", "a-week"])
def test_write_unsettled_past_the_horizon_goes_to_a_person(
    status: WriteStatus | None, contract: WriteContract, late_ms: int
) -> None:
    """However often the status query fails or finds nothing, once the default 24 h horizon since the
    first send has passed the card is NEEDS_RECONCILIATION: it is never rescheduled or resent forever."""
    step = _step(status, contract, now_ms=DISPATCHED + late_ms)
    assert step.next is Next.NEEDS_RECONCILIATION


@CONTRACTS
@pytest.mark.parametrize(("status", "expected"), [(APPLIED, Next.SUCCEEDED), (REFUSED, Next.FAILED)])
def test_backend_record_settles_the_write_even_past_the_horizon(
    status: WriteStatus, expected: Next, contract: WriteContract
) -> None:
    """The horizon hands over only what is still uncertain: the backend's own record settles the write."""
    assert _step(status, contract, now_ms=DISPATCHED + 7 * DAY).next is expected


@CONTRACTS
def test_horizon_counts_from_the_first_send_not_a_later_resend(contract: WriteContract) -> None:
    """A resend does not restart the horizon: it runs from the first time the key went out."""
    step = _step(NO_RECORD, contract, now_ms=DISPATCHED + DAY, last_ms=DISPATCHED + DAY - 1_000)
    assert step.next is Next.NEEDS_RECONCILIATION


@CONTRACTS
@pytest.mark.parametrize("status", [None, NO_RECORD], ids=["no-answer", "no-record"])
def test_a_rescheduled_query_is_never_later_than_the_horizon(
    status: WriteStatus | None, contract: WriteContract
) -> None:
    """Close to the horizon the next query is due at the horizon itself, so the card reaches a person on time."""
    step = _step(status, contract, now_ms=DISPATCHED + DAY - 100, last_ms=DISPATCHED + DAY - 200)
    assert (step.next, step.at_ms) == (Next.RESCHEDULE, DISPATCHED + DAY)


@settings(database=None, deadline=None, max_examples=examples(400))
@given(
    status=st.sampled_from([None, NO_RECORD]),
    dedupes=st.booleans(),
    horizon_ms=st.integers(min_value=1, max_value=30 * DAY),
    since_first_ms=st.integers(min_value=0, max_value=40 * DAY),
    since_last_ms=st.integers(min_value=0, max_value=40 * DAY),
)
def test_an_uncertain_write_is_handed_over_exactly_at_the_horizon(
    status: WriteStatus | None, dedupes: bool, horizon_ms: int, since_first_ms: int, since_last_ms: int
) -> None:
    """For any horizon and any times since the first and the latest send, an unsettled write is
    NEEDS_RECONCILIATION from the horizon on; before it, nothing is scheduled past the horizon."""
    now_ms = DISPATCHED + since_first_ms
    last_ms = now_ms - min(since_last_ms, since_first_ms)
    step = _step(status, _contract(dedupes=dedupes), now_ms=now_ms, last_ms=last_ms, horizon_ms=horizon_ms)
    if since_first_ms >= horizon_ms:
        assert step.next is Next.NEEDS_RECONCILIATION
    elif step.next is Next.RESCHEDULE:
        assert now_ms <= step.at_ms <= DISPATCHED + horizon_ms
    else:
        assert step.next in (Next.RESEND, Next.NEEDS_RECONCILIATION)


@pytest.mark.parametrize(
    ("sends", "expected"),
    [(1, Next.RESEND), (3, Next.RESEND), (4, Next.NEEDS_RECONCILIATION), (5, Next.NEEDS_RECONCILIATION)],
    ids=["first-send", "two-resends", "three-resends", "many"],
)
def test_resends_stop_at_the_contracts_cap(sends: int, expected: Next) -> None:
    """A write no lookup finds is resent at most `max_resends` times (3 by default); after that a person
    reconciles it, however long the backend would still remember the key."""
    settled = DISPATCHED + 2_000 * 2 ** (sends - 1)
    step = _step(NO_RECORD, KEYED, now_ms=min(settled, REMEMBERED - 1), sends=sends)
    assert KEYED.max_resends == 3
    assert step.next is expected


@pytest.mark.parametrize(
    ("sends", "waited_ms", "expected"),
    [(1, 2_000, Next.RESEND), (2, 2_000, Next.RESCHEDULE), (2, 4_000, Next.RESEND), (3, 7_999, Next.RESCHEDULE)],
    ids=["first-wait", "second-not-yet", "second-wait", "third-not-yet"],
)
def test_each_resend_waits_twice_as_long_as_the_one_before(sends: int, waited_ms: int, expected: Next) -> None:
    """Exponential backoff: after the n-th send a lookup that finds nothing resends only once
    ``settle * 2**(n-1)`` has passed since that send, so resends thin out instead of following every lookup."""
    step = _step(NO_RECORD, KEYED, now_ms=DISPATCHED + waited_ms, sends=sends)
    assert step.next is expected


def test_a_negative_resend_cap_is_refused_at_declaration() -> None:
    """`max_resends` below zero is a declaration error, not a contract that resends forever."""
    with pytest.raises(ToolDeclarationError) as raised:
        replace(KEYED, max_resends=-1)
    assert raised.value.code == "invalid_contract"


# -- what a contract says its API's answers mean --------------------------------------------------------


@EITHER_SEND
@pytest.mark.parametrize("cls", UPSTREAM_ERRORS, ids=lambda cls: cls.__name__)
def test_a_status_the_contract_calls_applied_is_succeeded_on_any_send(cls: type[UpstreamError], resend: bool) -> None:
    """An API whose 409 means "already applied": that answer is SUCCEEDED, for a first send or a resend, while
    the statuses it still calls "not applied" stay FAILED on a first send."""
    contract = replace(KEYED, not_applied_statuses=frozenset({404, 422}), applied_statuses=frozenset({409}))
    assert classify(_sent(cls, 409), contract, resend=resend) is Attempt.SUCCEEDED
    assert classify(_sent(cls, 404), contract, resend=resend) is (Attempt.UNKNOWN if resend else Attempt.FAILED)


@pytest.mark.parametrize(
    ("applied", "not_applied"),
    [({503}, frozenset()), ({429}, frozenset()), ({204}, frozenset()), ({409}, frozenset({409}))],
    ids=["5xx", "429", "2xx", "both"],
)
def test_a_contract_cannot_call_applied_what_proves_nothing(applied: set[int], not_applied: frozenset[int]) -> None:
    """A 5xx says nothing of what happened, a 429 says it was not processed, and a status cannot mean both."""
    with pytest.raises(ToolDeclarationError) as raised:
        WriteContract(
            dedupes_on_key=True,
            key_retention_seconds=100.0,
            status_lookup=_never_called,
            reference_field="booking_id",
            not_applied_statuses=not_applied,
            applied_statuses=frozenset(applied),
        )
    assert raised.value.code == "invalid_contract"


@CONTRACTS
def test_a_status_query_refused_429_is_asked_again_no_sooner_than_its_retry_after(contract: WriteContract) -> None:
    """A lookup the backend rate-limited waits its ``Retry-After`` (here 90 s, beyond the usual 0.5 s recheck),
    as a write refused 429 does, and still never past the horizon."""
    now = DISPATCHED + 1_000
    step = reconcile_step(
        None, contract, now_ms=now, first_dispatched_ms=DISPATCHED, dispatched_ms=DISPATCHED,
        execute_by_ms=EXECUTE_BY, horizon_ms=DAY, sends=1, wait_ms=90_000,
    )  # fmt: skip
    assert (step.next, step.at_ms) == (Next.RESCHEDULE, now + 90_000)
    late = reconcile_step(
        None, contract, now_ms=DISPATCHED + DAY - 1_000, first_dispatched_ms=DISPATCHED, dispatched_ms=DISPATCHED,
        execute_by_ms=EXECUTE_BY, horizon_ms=DAY, sends=1, wait_ms=90_000,
    )  # fmt: skip
    assert late.at_ms == DISPATCHED + DAY
