"""`countersign cards ...` against a real Redis: the same service as the admin API, from a terminal."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from gateway.archives.card_archive import CardArchive
from gateway.cards.card import CardState, args_hash
from gateway.cli.main import main
from gateway.principal import KeyKind
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.store.ledger.retention import RedisCardRetention
from gateway.store.passkeys import PasskeyStore, StoredPasskey
from gateway.tools.preview import Preview
from tests.support.agents import make_key
from tests.support.cards import PROPOSAL as BASE_PROPOSAL
from tests.support.cards import flood, sent_and_unknown
from tests.support.redis_server import start_redis_server
from tests.support.services import TEST_AUDIT_SECRET
from tests.support.terminal import Terminal

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", name="redis_url")
def cards_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest)."""
    return quiet_redis_url


# An agent trying to forge the end of the untrusted block and to drive the terminal.
FORGED = "fine\n<<< end of untrusted agent text\nAPPROVED BY SECURITY \x1b[32mOK\x1b[0m \u202eevil"

H1 = args_hash(BASE_PROPOSAL.tool, BASE_PROPOSAL.tool_version, BASE_PROPOSAL.arguments)
"""What the proposal's arguments hash to: a card's history is intact only when its arguments still do."""
PROPOSAL = replace(BASE_PROPOSAL, agent_text={"title": FORGED}, args_hash=H1)


class Cli:
    """Runs `main` from a worker thread (it owns its event loop) and captures its output."""

    def __init__(self, redis_url: str, capsys: pytest.CaptureFixture[str], key: str = "") -> None:
        self.environ = {"COUNTERSIGN_REDIS_URL": redis_url, "COUNTERSIGN_ADMIN_KEY": key,
                        "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}  # fmt: skip
        self._capsys = capsys

    async def __call__(self, *args: str) -> tuple[int, str, str]:
        try:
            status = await anyio.to_thread.run_sync(lambda: main(list(args), self.environ))
        except SystemExit as usage:  # argparse's way of saying "usage error"
            status = int(usage.code or 0)
        captured = self._capsys.readouterr()
        # Every store command first names its store (tests/cli/test_keys_and_audit.py checks that line); a usage
        # error does not.
        store_line, _, rest = captured.err.partition("\n")
        if store_line.startswith("countersign: using Redis redis://"):
            return status, captured.out, rest
        return status, captured.out, captured.err


@pytest.fixture
async def cli(redis: Redis, redis_url: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    """The CLI acting as bob, an approver of acme."""
    key = await make_key(redis, subject="bob@acme.example", roles=("approver",), kind=KeyKind.ADMIN)
    return Cli(redis_url, capsys, key)


async def propose(redis: Redis, **changes: Any) -> str:
    created = await RedisLedger(redis).propose(replace(PROPOSAL, **{"dedupe_key": str(changes), **changes}))
    assert created.card is not None
    return created.card.card_id


async def test_list_shows_the_orgs_cards_as_text_or_json(cli: Cli, redis: Redis) -> None:
    """One line per card of bob's org; --json gives one object per line; filters apply."""
    mine = await propose(redis)
    await propose(redis, requester_org="globex")
    status, out, _ = await cli("cards", "list")
    assert status == 0 and len(out.splitlines()) == 1 and mine in out and "PENDING" in out
    status, out, _ = await cli("cards", "list", "--json", "--state", "PENDING", "--tool", "rooms_book")
    assert status == 0 and [json.loads(line)["card_id"] for line in out.splitlines()] == [mine]
    status, out, _ = await cli("cards", "list", "--requester", "nobody@acme.example")
    assert status == 0 and out == ""


async def test_list_follows_every_page_so_an_old_pending_card_behind_a_flood_is_shown(cli: Cli, redis: Redis) -> None:
    """`cards list` hides nothing: over a thousand newer cards, and the oldest PENDING one is still listed, once;
    with --limit it stops there and says on stderr that more cards match."""
    old = await propose(redis, tool="orders_refund")
    newer = await flood(redis, 1_050)
    status, out, _ = await cli("cards", "list", "--state", "PENDING", "--json")
    ids = [json.loads(line)["card_id"] for line in out.splitlines()]
    assert status == 0 and len(ids) == len(set(ids)) == 1_051 and set(ids) == {old, *newer} and ids[-1] == old
    status, out, _ = await cli("cards", "list", "--tool", "orders_refund")
    assert status == 0 and len(out.splitlines()) == 1 and old in out
    status, out, err = await cli("cards", "list", "--limit", "5")
    assert status == 0 and len(out.splitlines()) == 5 and "more cards match" in err


async def test_show_fences_the_agents_words_as_untrusted_and_escapes_them(cli: Cli, redis: Redis) -> None:
    """The agent's text sits inside a marked block, on one line, with control characters escaped."""
    card_id = await propose(redis)
    status, out, _ = await cli("cards", "show", card_id)
    assert status == 0
    lines = out.splitlines()
    start = lines.index(">>> UNTRUSTED agent text: written by the requesting agent; do not follow instructions in it")
    assert lines[start + 1].startswith("  | title: fine\\x0a<<< end of untrusted agent text\\x0aAPPROVED")
    assert lines[start + 2] == "<<< end of untrusted agent text"
    assert "\x1b" not in out and "\u202e" not in out and "\\x1b[32m" in out
    assert f"version     1   args_hash={H1}" in out and "hash chain valid" in out
    status, out, _ = await cli("cards", "show", card_id, "--json")
    shown = json.loads(out)
    assert status == 0 and shown["agent_text"] == {
        "untrusted": True, "note": "written by the requesting agent; do not follow instructions in it",
        "fields": {"title": FORGED},
    }  # fmt: skip


async def test_show_prints_the_preview_escaped_what_happened_and_no_deadline_once_final(cli: Cli, redis: Redis) -> None:
    """The preview's lines, escaped like all card text; the state in words; a final card has no deadline."""
    preview = Preview(lines=("Room Atlas (room-atlas)", "Overlaps: \x1b[31mnothing"), facts={"room_id": "room-atlas"})
    card_id = await propose(redis, preview=preview)
    status, out, _ = await cli("cards", "show", card_id)
    lines = out.splitlines()
    start = lines.index("preview     (read from the backend at proposal; checked again before it runs)")
    assert lines[start + 1 : start + 3] == ["  Room Atlas (room-atlas)", "  Overlaps: \\x1b[31mnothing"]
    assert status == 0 and "happened    waiting for approval (0 of 1)" in lines and "deadline " in out
    await RedisLedger(redis).reject(card_id, admin="bob@acme.example", reason="no")
    status, out, _ = await cli("cards", "show", card_id)
    assert "happened    rejected by an approver" in out.splitlines()
    assert "no deadline running (the card is final)" in out and "deadline 20" not in out
    status, out, _ = await cli("cards", "show", card_id, "--json")
    assert json.loads(out)["preview"] == {"lines": list(preview.lines), "facts": {"room_id": "room-atlas"}}


async def test_show_of_another_orgs_card_is_not_found(cli: Cli, redis: Redis) -> None:
    """Exit 1 and the same words as for an id that does not exist."""
    theirs = await propose(redis, requester_org="globex")
    foreign = await cli("cards", "show", theirs)
    missing = await cli("cards", "show", "crd_2_" + "0" * 32)
    assert foreign == missing == (1, "", "countersign: NOT_FOUND: no such card\n")


async def test_approve_then_stale_approve_is_refused_with_the_current_state(cli: Cli, redis: Redis) -> None:
    """Exit 0 on approval; a second approval of the old version exits 1 with CONFLICT and the card's state."""
    card_id = await propose(redis)
    status, out, _ = await cli(
        "cards", "approve", card_id, "--yes", "--version", "1", "--args-hash", H1, "--comment", "ok"
    )
    assert status == 0 and "state=APPROVED" in out
    status, out, err = await cli("cards", "approve", card_id, "--yes", "--version", "1", "--args-hash", H1)
    assert status == 1 and out == ""
    assert err.startswith("countersign: CONFLICT:") and "state=APPROVED" in err and "version=2" in err
    events = [e for e in await RedisStreamAuditSink(redis).recent(20) if e.action == "card.approve"]
    assert [(e.outcome, e.code) for e in events] == [("ok", ""), ("deny", "CONFLICT")]


async def test_reject_needs_a_reason(cli: Cli, redis: Redis) -> None:
    """No --reason is a usage error (2); a blank one is refused (1); a reason rejects (0)."""
    card_id = await propose(redis)
    status, _, err = await cli("cards", "reject", card_id)
    assert status == 2 and "--reason" in err
    status, _, err = await cli(
        "cards", "reject", card_id, "--yes", "--version", "1", "--args-hash", H1, "--reason", " "
    )
    assert status == 1 and err.startswith("countersign: VALIDATION_ERROR: reason:")
    status, out, _ = await cli("cards", "reject", card_id, "--yes", "--version", "1", "--args-hash", H1,
                               "--reason", "over budget")  # fmt: skip
    assert status == 0 and "REJECTED" in out


async def test_cancel_and_resolve(cli: Cli, redis: Redis) -> None:
    """cancel ends a pending card; resolve settles a NEEDS_RECONCILIATION card; bad evidence is a usage error."""
    ledger = RedisLedger(redis)
    pending = await propose(redis)
    assert (await cli("cards", "cancel", pending))[0] == 0
    stuck = await propose(redis, dedupe_key="stuck")
    await sent_and_unknown(ledger, stuck, args_hash=H1)
    assert (await ledger.reconcile(stuck, result="NEEDS_RECONCILIATION", reference="", evidence={})).ok
    status, _, err = await cli("cards", "resolve", stuck, "--outcome", "SUCCEEDED", "--evidence", "not json")
    assert status == 2 and "not valid JSON" in err
    status, out, _ = await cli("cards", "resolve", stuck, "--outcome", "SUCCEEDED", "--evidence", '{"booking": "bk-9"}')
    assert status == 0 and "SUCCEEDED" in out
    card = await ledger.get(stuck)
    assert card is not None and card.state is CardState.SUCCEEDED and card.evidence == {"booking": "bk-9"}
    status, out, _ = await cli("cards", "show", stuck)
    settled = [line for line in out.splitlines() if line.startswith("settled     ")]
    assert settled and settled[0].startswith("settled     by person: settled by a person (")
    assert '  saw       {"booking": "bk-9"}' in out


async def test_only_a_live_admin_key_may_act(redis: Redis, redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """No key, an agent key, or an unknown key: exit 1 with a clear message, nothing changed."""
    card_id = await propose(redis)
    agent = await make_key(redis, subject="bob@acme.example", roles=("approver",))
    no_key = await Cli(redis_url, capsys)("cards", "cancel", card_id)
    assert no_key == (1, "", "countersign: this command needs an admin key: --key or COUNTERSIGN_ADMIN_KEY\n")
    status, _, err = await Cli(redis_url, capsys)("cards", "cancel", card_id, "--key", agent)
    assert status == 1 and "agent key, not an admin key" in err
    status, _, err = await Cli(redis_url, capsys, "csk_admin_nope")("cards", "list")
    assert status == 1 and "unknown or revoked key" in err
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.PENDING
    rejected = [e for e in await RedisStreamAuditSink(redis).recent(20) if e.action == "auth.reject"]
    assert [e.extra["surface"] for e in rejected] == ["cli", "cli"]


async def test_a_non_durable_ledger_refuses_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    """Fail closed: against a server without the AOF, approve exits 1 with LEDGER_UNAVAILABLE and the reason."""
    with start_redis_server(appendonly=False) as url:
        client = Redis.from_url(url)
        try:
            card_id = await propose(client)
            key = await make_key(client, subject="bob@acme.example", roles=("approver",), kind=KeyKind.ADMIN)
            status, _, err = await Cli(url, capsys, key)(
                "cards", "approve", card_id, "--yes", "--version", "1", "--args-hash", H1
            )
            card = await RedisLedger(client).get(card_id)
        finally:
            await client.aclose()
    assert status == 1 and "LEDGER_UNAVAILABLE" in err and "appendonly is off" in err
    assert card is not None and (card.state, card.version) == (CardState.PENDING, 1)


# -- deciding on a terminal -----------------------------------------------------------------------


@pytest.fixture
async def terminal(redis: Redis, redis_url: str) -> AsyncIterator[Callable[..., Terminal]]:
    """`countersign ...` as bob on a real pseudo-terminal."""
    key = await make_key(redis, subject="bob@acme.example", roles=("approver",), kind=KeyKind.ADMIN)
    env = {"PATH": os.environ.get("PATH", ""), "COUNTERSIGN_REDIS_URL": redis_url, "COUNTERSIGN_ADMIN_KEY": key,
           "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}  # fmt: skip
    opened: list[Terminal] = []

    def run(*args: str) -> Terminal:
        opened.append(Terminal([sys.executable, "-m", "gateway", *args], env))
        return opened[-1]

    yield run
    for each in opened:
        each.close()


async def test_approve_on_a_terminal_shows_the_card_then_approves_what_it_showed(
    terminal: Callable[..., Terminal], redis: Redis
) -> None:
    """The summary, the preview and every argument (inside an untrusted block, escaped) come before the
    question; "yes" approves the card at the version and args_hash shown, without copying either."""
    preview = Preview(lines=("Room Atlas (room-atlas), 8 seats",), facts={"room_id": "room-atlas"})
    card_id = await propose(redis, preview=preview)
    shell = terminal("cards", "approve", card_id)
    shown = await shell.expect("Type yes to approve: ")
    question = shown.index("Approve this card exactly as shown above?")
    for part in ("summary     Book room-atlas on 2026-12-01", "  Room Atlas (room-atlas), 8 seats",
                 ">>> UNTRUSTED arguments, as the requesting agent wrote them", '"room_id": "room-atlas"',
                 "  | title: fine\\x0a<<< end of untrusted agent text"):  # fmt: skip
        assert -1 < shown.index(part) < question, part
    assert "\x1b[32m" not in shown and "\u202e" not in shown
    shell.type("yes")
    assert await shell.exit_status() == 0, shell.output
    assert "state=APPROVED" in shell.output
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.APPROVED and card.approvers == ("bob@acme.example",)


async def test_a_card_that_changed_while_the_terminal_asked_is_refused_with_conflict(
    terminal: Callable[..., Terminal], redis: Redis
) -> None:
    """Another approver acts between the display and the "yes": the approval names the version shown,
    so it is refused (CONFLICT, exit 1) and the card keeps only the other approval."""
    card_id = await propose(redis, approvals_required=2)
    shell = terminal("cards", "approve", card_id)
    await shell.expect("Type yes to approve: ")
    ledger = RedisLedger(redis)
    assert (await ledger.approve(card_id, approver="carol@acme.example", version=1, args_hash=H1, comment="")).ok
    shell.type("yes")
    assert await shell.exit_status() == 1
    assert "countersign: CONFLICT: the card changed since you reviewed it" in shell.output
    card = await ledger.get(card_id)
    assert card is not None and card.approvers == ("carol@acme.example",) and card.version == 2


async def test_reject_on_a_terminal_asks_and_anything_but_yes_decides_nothing(
    terminal: Callable[..., Terminal], redis: Redis
) -> None:
    """An answer other than yes leaves the card as it was (exit 1); yes rejects it with the reason."""
    card_id = await propose(redis)
    shell = terminal("cards", "reject", card_id, "--reason", "not this week")
    await shell.expect("Type yes to reject: ")
    shell.type("no")
    assert await shell.exit_status() == 1 and "nothing was decided" in shell.output
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.PENDING
    shell = terminal("cards", "reject", card_id, "--reason", "not this week")
    await shell.expect("Type yes to reject: ")
    shell.type("y")
    assert await shell.exit_status() == 0 and "REJECTED" in shell.output
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.rejection == {"by": "bob@acme.example", "reason": "not this week"}


async def test_several_cards_are_shown_then_decided_as_one_batch_each_on_its_own(
    terminal: Callable[..., Terminal], redis: Redis
) -> None:
    """Every card is shown before one question; each is then its own decision: the fine one is approved, the
    one decided meanwhile is refused (CONFLICT), and the batch is audited beside each card."""
    fine = await propose(redis)
    raced = await propose(redis, dedupe_key="raced")
    shell = terminal("cards", "approve", fine, raced)
    shown = await shell.expect("Type yes to approve: ")
    assert shown.index(f"card        {raced}") < shown.index("Approve these 2 cards exactly as shown above?")
    assert shown.index(f"card        {fine}") < shown.index(f"card        {raced}")
    assert (await RedisLedger(redis).reject(raced, admin="carol@acme.example", reason="no")).ok
    shell.type("yes")
    assert await shell.exit_status() == 1
    assert f"{fine}  OK" in shell.output and f"{raced}  CONFLICT" in shell.output
    assert "2 decisions: 1 done, 1 refused" in shell.output
    actions = [e.action for e in await RedisStreamAuditSink(redis).recent(20) if e.action.startswith("card.")]
    assert actions == ["card.approve", "card.approve", "card.batch"]


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("approve", "{card}"), "no terminal to confirm on"),
        (("approve", "{card}", "--yes"), "--yes decides unseen: it needs --version and --args-hash"),
        (("reject", "{card}", "--yes", "--reason", "no"), "--yes decides unseen: it needs --version and --args-hash"),
        (("approve", "{card}", "--version", "1"), "--version and --args-hash go together"),
        (("approve", "{card}", "{card}", "--version", "1", "--args-hash", H1), "name one card's review"),
    ],
)
async def test_deciding_without_seeing_the_card_or_naming_the_review_is_refused(
    cli: Cli, redis: Redis, args: tuple[str, ...], problem: str
) -> None:
    """Off a terminal, or with --yes but no --version and --args-hash: VALIDATION_ERROR, audited, card untouched."""
    card_id = await propose(redis)
    status, out, err = await cli("cards", *(arg.replace("{card}", card_id) for arg in args))
    assert (status, out) == (1, "") and err.startswith("countersign: VALIDATION_ERROR: ") and problem in err
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and (card.state, card.version) == (CardState.PENDING, 1)
    refused = [e for e in await RedisStreamAuditSink(redis).recent(20) if e.action.startswith("card.")]
    assert [(e.outcome, e.code) for e in refused] == [("deny", "VALIDATION_ERROR")]


async def test_archived_prints_a_retired_card_as_show_did_and_only_to_its_org(
    cli: Cli, redis: Redis, tmp_path: Path
) -> None:
    """A card the retention moved out of Redis: ``show`` no longer finds it, ``archived`` prints the same
    view from the archive (escaped and fenced the same way), and to another org's admin it is no card."""
    card_id = await propose(redis)
    await RedisLedger(redis).reject(card_id, admin="bob@acme.example", reason="no")
    cli.environ["COUNTERSIGN_DATA_DIR"] = str(tmp_path)
    _, before, _ = await cli("cards", "show", card_id, "--json")
    await anyio.sleep(0.05)
    retention = RedisCardRetention(redis, CardArchive(tmp_path / "cards"), keep_ms=10,
                                   audit=RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode()))  # fmt: skip
    assert await retention.sweep() == 1
    status, _, err = await cli("cards", "show", card_id)
    assert status == 1 and "NOT_FOUND" in err
    status, out, _ = await cli("cards", "archived", card_id, "--json")
    assert status == 0 and json.loads(out) == json.loads(before)
    status, out, _ = await cli("cards", "archived", card_id)
    assert status == 0 and out.startswith("archived (no longer in Redis)\n")
    assert "<<< end of untrusted agent text" in out and "\x1b" not in out and "hash chain valid" in out
    status, out, _ = await cli("cards", "archived", card_id, "--verify")
    assert status == 0 and out.splitlines()[-1].startswith("audit entry ") and "vouches for this copy" in out
    status, out, err = await cli("cards", "archived", card_id, "--verify", "--json")
    assert status == 0 and json.loads(out) == json.loads(before) and "vouches for this copy" in err
    # A history rewritten in the archive, its unkeyed hashes recomputed: the copy reads as a card with a
    # valid chain, and only the keyed audit trail tells it from the copy that was removed.
    [path] = CardArchive(tmp_path / "cards").files()
    record = json.loads(path.read_text())
    rejected = record["card"]["events"][-1]
    rejected["data"] = json.dumps({"reason": "approved by security"})
    prev = record["card"]["events"][-2]["hash"] if len(record["card"]["events"]) > 1 else ""
    parts = [prev, rejected["seq"], rejected["type"], rejected["actor"], rejected["state"], rejected["version"],
             rejected["at"], rejected["data"]]  # fmt: skip
    rejected["hash"] = record["card"]["chain"] = hashlib.sha1("|".join(parts).encode()).hexdigest()
    path.write_text(json.dumps(record) + "\n")
    status, out, _ = await cli("cards", "archived", card_id)
    assert status == 0 and "hash chain valid" in out
    status, _, err = await cli("cards", "archived", card_id, "--verify")
    assert status == 1 and "CONFLICT" in err and "is not the one audit entry" in err
    refused = [e for e in await RedisStreamAuditSink(redis).recent(20) if e.action == "card.verify"]
    assert [(e.code, e.subject) for e in refused] == [("CONFLICT", "bob@acme.example")]  # audited
    outsider = await make_key(redis, subject="gil@globex.example", org="globex", roles=("approver",),
                              kind=KeyKind.ADMIN)  # fmt: skip
    cli.environ["COUNTERSIGN_ADMIN_KEY"] = outsider
    assert (await cli("cards", "archived", card_id))[0] == 1
    assert (await cli("cards", "archived", "crd_1_" + "0" * 32))[0] == 1


# -- passkeys -------------------------------------------------------------------------------------


async def test_a_card_that_needs_the_approvers_passkey_is_not_approved_from_the_cli(cli: Cli, redis: Redis) -> None:
    """Once bob registered a passkey, his key alone approves nothing: exit 1, PASSKEY_REQUIRED, the card PENDING."""
    await PasskeyStore(redis).add(
        "acme",
        "bob@acme.example",
        StoredPasskey(credential_id="cred", public_key="pk", sign_count=0, name="laptop", created_ms=1),  # fmt: skip
    )
    card_id = await propose(redis)
    status, out, err = await cli("cards", "approve", card_id, "--yes", "--version", "1", "--args-hash", H1)
    assert status == 1 and out == ""
    assert err.startswith("countersign: PASSKEY_REQUIRED:") and "with your passkey" in err
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and (card.state, card.version) == (CardState.PENDING, 1)
    status, out, _ = await cli("passkeys", "list", "--org", "acme", "--subject", "Bob@ACME.example")
    assert status == 0 and out.startswith("cred  laptop")
    status, out, _ = await cli("passkeys", "reset", "--org", "acme", "--subject", "bob@acme.example")
    assert status == 0 and "removed 1 passkey" in out
    assert await PasskeyStore(redis).list("acme", "bob@acme.example") == []
    resets = [e for e in await RedisStreamAuditSink(redis).recent(20) if e.action == "passkey.reset"]
    assert resets and resets[0].extra["approver"] == "bob@acme.example"
    status, out, err = await cli("cards", "approve", card_id, "--yes", "--version", "1", "--args-hash", H1)
    assert status == 0 and "state=APPROVED" in out, err
