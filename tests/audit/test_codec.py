"""The stored form of audit entries: the compact form reads back as the event it was made from."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.audit.codec import ACTIONS, CODED_EXTRA, OUTCOMES, decode, encode, entry_seq
from gateway.audit.events import AuditEvent

text = st.text(max_size=12)
key_ids = st.one_of(st.just(""), st.from_regex(r"key_[0-9a-f]{12}", fullmatch=True), text,
                    st.from_regex(r"key_[0-9A-F]{12}", fullmatch=True))  # fmt: skip
card_ids = st.one_of(st.from_regex(r"crd_[0-9]{1,2}_[0-9a-f]{32}", fullmatch=True), text,
                     st.from_regex(r"crd_[0-9]{3}_[0-9a-f]{32}", fullmatch=True))  # fmt: skip
words = st.one_of(st.sampled_from([*ACTIONS, *OUTCOMES]), text, st.from_regex(r"[0-9]{1,3}", fullmatch=True))
events = st.builds(
    AuditEvent,
    action=words, outcome=words, subject=text, org=text, key_id=key_ids, tool=text, code=text, reason=text,
    latency_ms=st.one_of(st.none(), st.floats(-1e6, 1e9), st.sampled_from([math.inf, -math.inf])),
    extra=st.one_of(st.dictionaries(text, text, max_size=3), st.builds(lambda c, d: {"card_id": c, **d}, card_ids,
                    st.dictionaries(st.sampled_from([*CODED_EXTRA, "x"]), st.sampled_from(
                        [*CODED_EXTRA["state"][1], "true", "false", "", "2"]), max_size=2))),
)  # fmt: skip


@given(event=events, seq=st.integers(1, 10**12))
def test_a_compact_entry_reads_back_as_the_event_it_was_stored_from(event: AuditEvent, seq: int) -> None:
    """Every field and every `extra` key and value comes back, whatever its shape; latency to the microsecond."""
    stored = {**event.to_stored(), "m": "MAC"}
    read = AuditEvent.from_fields(f"1796134125350-{seq}", stored)
    for name in ("action", "outcome", "subject", "org", "key_id", "tool", "code", "reason"):
        assert getattr(read, name) == getattr(event, name), name
    assert read.extra == event.extra
    if event.latency_ms is None or read.latency_ms is None:
        assert read.latency_ms == event.latency_ms
    elif math.isinf(event.latency_ms):
        assert read.latency_ms == event.latency_ms
    else:
        assert abs(read.latency_ms - event.latency_ms) <= 0.0005 + 1e-9 * abs(event.latency_ms)
    logical = decode(f"1796134125350-{seq}", stored)
    assert (logical["seq"], logical["mac"]) == (str(seq), "MAC")


def test_a_proposal_entry_stores_its_ids_as_bytes_and_its_words_as_codes() -> None:
    """The bench's proposal entry, field by field: what `bench/card_bytes.py` measures."""
    event = AuditEvent(action="card.propose", outcome="ok", subject="bench@acme.example", org="acme",
                       key_id="key_0123456789ab", tool="rooms_book", latency_ms=1.234,
                       extra={"card_id": "crd_3_" + "00ff" * 8, "existing": "false", "state": "PENDING"})  # fmt: skip
    assert event.to_stored() == {"a": "2", "o": "1", "s": "bench@acme.example", "g": "acme", "k": "ASNFZ4mr",
                                 "t": "rooms_book", "l": "1234", "i": "3AP8A_wD_AP8A_wD_AP8A_w", "e": "0",
                                 "z": "1"}  # fmt: skip


def test_an_old_entry_reads_as_it_is_stored_and_a_compact_one_takes_its_number_from_q_or_its_id() -> None:
    """Version 1 fields are the logical fields; a compact entry's number is ``q`` when it has one."""
    old = {"action": "tool.call", "outcome": "ok", "seq": "7", "mac": "ab" * 32}
    assert decode("1-0", old) == old and entry_seq("1-0", old) == "7"
    compact = encode(action="tool.call", outcome="ok", subject="", org="", key_id="", tool="t", code="",
                     reason="", latency_ms=None, extra={})  # fmt: skip
    assert entry_seq("5-8", {**compact, "m": "x"}) == "8"
    assert entry_seq("5-0", {**compact, "m": "x", "q": "9"}) == "9"


@pytest.mark.parametrize(
    ("stored", "name", "read"),
    [({"k": "ASNFZ4m"}, "key_id", "ASNFZ4m"), ({"k": "ASNFZ4m="}, "key_id", "ASNFZ4m="),
     ({"i": "3AP8A_wD_AP8A_wD_AP8A_x"}, "extra", '{"card_id": "3AP8A_wD_AP8A_wD_AP8A_x"}'),
     ({"i": "²AP8A_wD_AP8A_wD_AP8A_w"}, "extra", '{"card_id": "\\u00b2AP8A_wD_AP8A_wD_AP8A_w"}'),
     ({"l": "1.5"}, "latency_ms", "1.5"), ({"l": "²"}, "latency_ms", "²"), ({"a": "999"}, "action", "999"),
     ({"z": "99"}, "extra", '{"state": "99"}'), ({"w": "later"}, "w", "later")],
)  # fmt: skip
def test_a_value_its_version_does_not_write_is_read_as_it_is_stored(
    stored: dict[str, str], name: str, read: str
) -> None:
    """A changed entry still reads (the chain check is what says it was changed); a name from a later version too."""
    assert decode("1-1", {**stored, "m": "x"})[name] == read
