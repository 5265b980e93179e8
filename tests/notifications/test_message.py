"""What a notification says and how it is signed (`gateway.notifications.message`): pure, no I/O."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.cards.card import CardState
from gateway.notifications.message import (
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    NotificationEvent,
    PayloadFormat,
    Webhook,
    card_url,
    notification_id,
    render,
    sign,
    signed_headers,
    verify,
)
from gateway.provenance import Provenance, ProvenanceRead
from tests.support.cards import a_card

CONSOLE = "https://gw.example"
HOOK = Webhook(name="ops", url="https://hooks.example/x", secret="s3cret")
SLACK = Webhook(name="chat", url="https://hooks.example/y", secret="s3cret", format=PayloadFormat.SLACK)


def test_a_signature_verifies_and_any_change_of_body_secret_or_timestamp_breaks_it() -> None:
    """`verify` is the receiver's check: it accepts exactly what `sign` signed, within the tolerance."""
    body = '{"a":1}'
    signature = sign("k", 1000, body)
    assert signature.startswith("v1=") and len(signature) == 3 + 64
    assert verify("k", 1000, body, signature, now=1000)
    assert not verify("k", 1000, '{"a":2}', signature, now=1000)
    assert not verify("other", 1000, body, signature, now=1000)
    assert not verify("k", 1001, body, signature, now=1001)
    assert not verify("k", 1000, body, signature, now=1000 + 301)  # a replay long after


def test_headers_carry_the_timestamp_the_signature_and_a_stable_id() -> None:
    notification = render(a_card(), NotificationEvent.PENDING, webhook=HOOK, console_url=CONSOLE)
    first = signed_headers(notification.id, notification.body, "s3cret", 10)
    later = signed_headers(notification.id, notification.body, "s3cret", 99)
    assert first[ID_HEADER] == later[ID_HEADER] == notification.id
    assert first[TIMESTAMP_HEADER] == "10" and later[TIMESTAMP_HEADER] == "99"
    assert verify("s3cret", 99, notification.body, later[SIGNATURE_HEADER], now=99)


def test_the_id_is_the_same_for_the_same_card_event_and_webhook_only() -> None:
    card_id = "crd_1_" + "0" * 32
    same = notification_id(card_id, NotificationEvent.PENDING, "ops")
    assert same == notification_id(card_id, NotificationEvent.PENDING, "ops")
    assert same != notification_id(card_id, NotificationEvent.FAILED, "ops")
    assert same != notification_id(card_id, NotificationEvent.PENDING, "chat")


def test_the_json_body_links_the_card_and_keeps_the_agents_words_under_untrusted() -> None:
    body = json.loads(render(a_card(), NotificationEvent.PENDING, webhook=HOOK, console_url=CONSOLE + "/").body)
    assert body["console_url"] == "https://gw.example/admin/#/cards/crd_1_" + "0" * 32
    assert body["event"] == "card.pending" and body["card"]["state"] == "PENDING"
    assert body["untrusted"] == {"summary": "Book room-eos on 2026-12-10", "agent_text": {"title": "Planning"}}
    outside = json.dumps({k: v for k, v in body.items() if k != "untrusted"})
    assert "Planning" not in outside


def test_a_webhook_hears_only_of_its_orgs_roles_and_events() -> None:
    narrow = Webhook(name="n", url="https://h", secret="s", orgs=frozenset({"acme"}),
                     approver_roles=frozenset({"finance"}), events=frozenset({NotificationEvent.FAILED}))  # fmt: skip
    card = a_card(approver_role="finance")
    assert narrow.wants(card, NotificationEvent.FAILED)
    assert not narrow.wants(card, NotificationEvent.PENDING)
    assert not narrow.wants(a_card(approver_role="approver"), NotificationEvent.FAILED)
    assert not narrow.wants(a_card(requester_org="globex", approver_role="finance"), NotificationEvent.FAILED)
    assert HOOK.wants(a_card(requester_org="anyone"), NotificationEvent.PENDING)


MARK = "ZQXJ"
agent_words = st.text(max_size=60).map(lambda text: MARK + text)


@given(summary=agent_words, words=st.dictionaries(st.text(min_size=1, max_size=8), agent_words, max_size=3))
def test_slack_shows_the_agents_words_only_inside_the_quote_and_never_as_markup(
    summary: str, words: dict[str, str]
) -> None:
    """Whatever the agent wrote: it is absent from the text, the headline and the button, and in the
    quote no ``<`` (a link or mention), no newline that would end the quote, and no formatting mark."""
    body = json.loads(
        render(
            a_card(summary=summary, agent_text=words), NotificationEvent.PENDING, webhook=SLACK, console_url=CONSOLE
        ).body  # fmt: skip
    )
    headline, quote, actions = body["blocks"]
    assert MARK not in body["text"] and MARK not in json.dumps(headline) and MARK not in json.dumps(actions)
    quoted = quote["text"]["text"].split("\n", 1)[1]
    assert "<" not in quoted and ">" not in quoted.replace("&gt;", "")
    assert all(line.startswith("&gt; ") for line in quoted.split("\n"))
    for mark in "*_~":
        assert mark not in quoted.replace(f"\u200b{mark}\u200b", "")
    assert "`" not in quoted
    assert actions["elements"][0]["url"] == card_url(CONSOLE, a_card().card_id)


def test_slack_escapes_a_mention_and_a_link_an_agent_wrote() -> None:
    card = a_card(summary="<!channel> see <https://evil.example|here> *now*", agent_text={"t": "a\n> b"})
    quote = json.loads(render(card, NotificationEvent.PENDING, webhook=SLACK, console_url=CONSOLE).body)["blocks"][1]
    text = quote["text"]["text"]
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text
    assert "<https://evil.example" not in text
    assert "&gt; t: a &gt; b" in text  # the newline is folded: the agent cannot end the quote


def test_the_readme_delivery_verifies_with_the_readme_recipe() -> None:
    """The README's example delivery (secret ``s3cret``) passes the receiver's check it shows, and `verify`."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    head, wrapped = text.split("```http\n", 1)[1].split("```", 1)[0].split("\n\n", 1)
    body = wrapped.strip().replace("\n", "")
    headers = dict(line.split(": ", 1) for line in head.splitlines()[1:])
    stamp = int(headers[TIMESTAMP_HEADER])
    assert verify("s3cret", stamp, body, headers[SIGNATURE_HEADER], now=stamp)
    recipe = "import hashlib, hmac, time" + text.split("```python\nimport hashlib, hmac, time", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(recipe, namespace)  # the documented receiver, as written
    namespace["time"] = type("Clock", (), {"time": staticmethod(lambda: stamp)})
    seen: set[str] = set()
    assert namespace["verify"](b"s3cret", headers, body.encode(), seen)
    assert not namespace["verify"](b"s3cret", headers, body.encode(), seen)  # a redelivery is deduplicated
    assert not namespace["verify"](b"s3cret", headers, body.encode()[:-1] + b" ", set())


def test_a_slack_warning_says_when_the_card_expires_and_a_finished_card_says_no_deadline() -> None:
    card = a_card(decide_by_ms=1_796_115_600_000)
    pending = json.loads(render(card, NotificationEvent.EXPIRING, webhook=SLACK, console_url=CONSOLE).body)
    head = pending["blocks"][0]["text"]["text"]
    assert head.startswith("*A card expires soon without a decision")
    assert "decide by 2026-12-01T09:00:00+00:00" in head
    failed = json.loads(render(a_card(state=CardState.FAILED), NotificationEvent.FAILED, webhook=SLACK,
                               console_url=CONSOLE).body)  # fmt: skip
    assert "decide by" not in failed["blocks"][0]["text"]["text"]


def test_a_tainted_cards_notification_carries_its_provenance_and_slack_says_so_first() -> None:
    """The JSON body has the card's provenance in the agreed shape; Slack's headline opens with TAINTED."""
    provenance = Provenance(
        tainted=True,
        data_flow=False,
        reads=[
            ProvenanceRead(
                tool="rooms_availability", at="2026-12-01T08:00:00.000+00:00", untrusted_text=True, private=False
            )
        ],  # fmt: skip
    )
    card = a_card(provenance=provenance)
    body = json.loads(render(card, NotificationEvent.PENDING, webhook=HOOK, console_url=CONSOLE).body)
    assert body["provenance"] == provenance.model_dump(mode="json")
    assert body["provenance"]["reads"][0]["tool"] == "rooms_availability"
    assert (
        json.loads(render(a_card(), NotificationEvent.PENDING, webhook=HOOK, console_url=CONSOLE).body)["provenance"]
        is None
    )
    slack = json.loads(render(card, NotificationEvent.PENDING, webhook=SLACK, console_url=CONSOLE).body)
    assert slack["blocks"][0]["text"]["text"].startswith("*TAINTED")
