"""The reference filesystem MCP server (npm, pinned) fronted over stdio, in a directory the test owns:
reads pass the access check, writes wait for a countersignature and run exactly once."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from gateway.cards.card import CardState
from gateway.cards.settlement import SettledBy, settlement_of
from gateway.config.upstreams import EditRule, LookupRule, PreviewRule, RenameRule, ToolReview, UpstreamSection
from gateway.runtime.app import Gateway
from gateway.runtime.worker import Worker
from gateway.store.keys import KeyStore
from gateway.untrusted import WITHHELD
from gateway.upstreams.connection import UpstreamConnection
from gateway.upstreams.review import definition_hash
from gateway.upstreams.tools import upstream_tools
from tests.support.agents import make_key
from tests.support.cards import approve
from tests.support.mcp_servers import NodeServer, fronting_settings
from tests.support.services import in_process_gateway

pytestmark = pytest.mark.anyio

CANARY = "COUNTERSIGN_CANARY_SECRET"


def _section(server: NodeServer, root: Path, reviews: Mapping[str, ToolReview], **stdio: Any) -> UpstreamSection:
    return UpstreamSection(
        transport="stdio",
        command=stdio.get("command", str(server.node)),
        args=stdio.get("args", (str(server.entry), str(root))),
        env=stdio.get("env", ()),
        tools=dict(reviews),
    )


def _reviews(listing: list[dict[str, Any]], root: Path) -> dict[str, ToolReview]:
    """A person's review: reads and writes classified, each pinned to the definition listed now."""
    pinned = {tool["name"]: definition_hash(tool) for tool in listing}
    reads = {"read_text_file": True, "list_directory": False}
    reviews = {
        name: ToolReview(mode="read", definition=pinned[name], roles=("staff",), trusted_output=trusted)
        for name, trusted in reads.items()
    }
    current = PreviewRule(tool="read_text_file", arguments={"path": "path"}, compare="content")
    holds = LookupRule(tool="read_text_file", arguments={"path": "path"}, equals="content")
    reviews["write_file"] = ToolReview(
        mode="write", definition=pinned["write_file"], roles=("staff",), preview=current, lookup=holds
    )
    edited = PreviewRule(
        tool="read_text_file",
        arguments={"path": "path"},
        edits=EditRule(argument="edits", old="oldText", new="newText"),
    )
    moved = PreviewRule(
        tool="read_text_file",
        arguments={"path": "source"},
        renames=RenameRule(source="source", destination="destination"),
    )
    for name, shown in (("edit_file", edited), ("move_file", moved)):
        reviews[name] = ToolReview(mode="write", definition=pinned[name], roles=("staff",), preview=shown)
    return reviews


@asynccontextmanager
async def _fronting(
    server: NodeServer, root: Path, redis_url: str, *, relay: tuple[str, ...] = ()
) -> AsyncIterator[Gateway]:
    """A gateway serving the filesystem server on `root` as a person reviewed it; `relay` runs the server
    through a command that stands on its pipe (the server's own command follows it)."""
    probe = UpstreamConnection("files", _section(server, root, {}), secrets={})
    async with probe.running():
        listing = await probe.list_tools()
    stdio = {"command": relay[0], "args": (*relay[1:], str(server.node), str(server.entry), str(root))} if relay else {}
    section = _section(server, root, _reviews(listing, root), **stdio)
    connection = UpstreamConnection("files", section, secrets={})
    settings = fronting_settings(redis_url, "files", section, roles=("staff", "approver"))
    async with connection.running():
        tools, held = upstream_tools("files", listing, section.tools, connection, taken=frozenset())
        assert {tool.name for tool in tools} == {
            "files_read_text_file",
            "files_list_directory",
            "files_write_file",
            "files_edit_file",
            "files_move_file",
        }
        assert "read_file" in {q.name for q in held if q.reason == "unreviewed"}  # not reviewed: not served
        async with in_process_gateway(settings, tools) as gateway:
            yield gateway


@pytest.fixture
async def fronted(
    filesystem_server: NodeServer, tmp_path: Path, redis: Redis, redis_url: str
) -> AsyncIterator[tuple[Gateway, Path]]:
    root = tmp_path / "files"
    root.mkdir()
    (root / "plan.txt").write_text("step one\n")
    async with _fronting(filesystem_server, root, redis_url) as gateway:
        yield gateway, root


async def _run_worker(gateway: Gateway, card_id: str) -> None:
    worker = Worker(gateway.executor.writes, gateway.ledger, block_ms=50)
    await gateway.ledger.ensure_outbox_group()
    with anyio.fail_after(20):
        while (card := await gateway.ledger.get(card_id)) is not None and card.state is CardState.APPROVED:
            await worker.consume_once()


async def test_a_read_tool_runs_through_the_access_check(fronted: tuple[Gateway, Path], redis: Redis) -> None:
    """read_text_file, reviewed read with trusted output, answers the file; a caller without the role gets nothing."""
    gateway, _root = fronted
    staff = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
    outsider = await KeyStore(redis).resolve(await make_key(redis, roles=("approver",), subject="bob@acme.example"))
    assert staff is not None and outsider is not None
    read = await gateway.executor.agent.execute(staff, "files_read_text_file", {"path": "plan.txt"})
    assert read.for_model()["text"] == "step one\n"
    denied = await gateway.executor.agent.execute(outsider, "files_read_text_file", {"path": "plan.txt"})
    assert denied.code is not None and "text" not in denied.for_model()


async def test_a_read_is_third_party_text_unless_the_review_says_otherwise(
    fronted: tuple[Gateway, Path], redis: Redis
) -> None:
    """list_directory, reviewed without trusted_output: the model gets the text withheld, people get it."""
    gateway, _root = fronted
    staff = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
    assert staff is not None
    listed = await gateway.executor.agent.execute(staff, "files_list_directory", {"path": "."})
    assert listed.for_model()["text"] == WITHHELD and listed.untrusted


async def test_arguments_outside_the_upstream_schema_make_no_card(fronted: tuple[Gateway, Path], redis: Redis) -> None:
    """write_file without its content is refused against the upstream's inputSchema; no card exists."""
    gateway, _root = fronted
    staff = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
    assert staff is not None
    refused = await gateway.executor.agent.execute(staff, "files_write_file", {"path": "plan.txt"})
    assert refused.code is not None and "card_id" not in refused.for_model()


async def test_an_approved_write_file_changes_the_file_exactly_once(
    fronted: tuple[Gateway, Path], redis: Redis
) -> None:
    """write_file files a card showing the current content and the diff; approved, the worker writes once."""
    gateway, root = fronted
    staff = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
    assert staff is not None
    receipt = await gateway.executor.agent.execute(
        staff, "files_write_file", {"path": str(root / "plan.txt"), "content": "step two\n"}
    )
    card_id = receipt.for_model()["card_id"]
    assert (root / "plan.txt").read_text() == "step one\n"  # a card, not a write
    card = await gateway.ledger.get(card_id)
    assert card is not None and card.preview is not None
    lines = "\n".join(card.preview.lines)
    assert "  step one" in lines and "-step one" in lines and "+step two" in lines
    await approve(gateway.ledger, card_id)
    await _run_worker(gateway, card_id)
    done = await gateway.ledger.get(card_id)
    assert done is not None and done.state is CardState.SUCCEEDED
    assert (root / "plan.txt").read_text() == "step two\n"
    assert [event.type for event in await gateway.ledger.events(card_id)].count("dispatched") == 1


async def test_edit_and_move_are_cards_and_a_rejected_card_changes_nothing(
    fronted: tuple[Gateway, Path], redis: Redis
) -> None:
    """edit_file and move_file each file a card showing the file as it is and the diff the write makes (the edited
    text; the moved path); rejected, the files stay as they were."""
    gateway, root = fronted
    staff = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
    assert staff is not None
    edit = {"path": str(root / "plan.txt"), "edits": [{"oldText": "one", "newText": "uno"}]}
    move = {"source": str(root / "plan.txt"), "destination": str(root / "moved.txt")}
    for tool, arguments in (("files_edit_file", edit), ("files_move_file", move)):
        card_id = (await gateway.executor.agent.execute(staff, tool, arguments)).for_model()["card_id"]
        card = await gateway.ledger.get(card_id)
        assert card is not None and card.preview is not None
        assert "  step one" in card.preview.lines  # the approver sees the file as it is now
        changes = {line for line in card.preview.lines[card.preview.lines.index("diff:") :] if line[2:3] in "+-"}
        if tool == "files_edit_file":  # and what the write changes
            assert {"  -step one", "  +step uno"} <= changes
        else:
            assert {f"  -{root / 'plan.txt'}", f"  +{root / 'moved.txt'}"} <= changes
        rejected = await gateway.ledger.reject(
            card_id, admin="carol@acme.example", reason="no", version=card.version, args_hash=card.args_hash
        )
        assert rejected.ok and rejected.card is not None and rejected.card.state is CardState.REJECTED
    assert (root / "plan.txt").read_text() == "step one\n" and not (root / "moved.txt").exists()


async def test_an_unknown_write_settles_by_its_lookup(fronted: tuple[Gateway, Path], redis: Redis) -> None:
    """The lookup reads the file back: holding the approved content is "applied"; anything else stays unknown.
    Compared with the card's preview (the same read, at proposal), a file that held that content already then
    is said to have held before: the read cannot tell whether this write changed anything."""
    gateway, root = fronted
    tool = gateway.live.current()["files_write_file"]
    assert tool.write_contract is not None and not tool.write_contract.dedupes_on_key  # never a resend
    staff = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
    assert staff is not None
    ctx = gateway.executor.writes._invoker.context(tool, staff)
    approved = {"path": str(root / "plan.txt"), "content": "step one\n"}
    lookup = tool.write_contract.status_lookup

    found = await lookup("key", replace(ctx, approved_arguments=approved))
    assert (found.state, found.detail["held_at_proposal"]) == ("applied", None)  # no card, no read at proposal
    other = {**approved, "content": "something else"}
    assert (await lookup("key", replace(ctx, approved_arguments=other))).state == "unknown"

    card_id = (await gateway.executor.agent.execute(staff, "files_write_file", approved)).for_model()["card_id"]
    card = await gateway.ledger.get(card_id)
    assert card is not None and card.preview is not None
    held = await lookup("key", replace(ctx, approved_arguments=card.arguments, preview_facts=card.preview.facts))
    assert (held.state, held.detail["held_at_proposal"]) == ("applied", True)


async def test_the_stdio_child_receives_only_the_allowlisted_environment(
    filesystem_server: NodeServer, tmp_path: Path
) -> None:
    """A canary in the gateway's environment never reaches the child; an allowlisted name does, and nothing else."""
    dump = tmp_path / "child.env"
    script = f'env > "{dump}"; exec "{filesystem_server.node}" "{filesystem_server.entry}" "{tmp_path}"'
    section = _section(filesystem_server, tmp_path, {}, command="/bin/sh", args=("-c", script), env=("SHARED_VAR",))
    environ = {**os.environ, CANARY: "do-not-leak", "SHARED_VAR": "shared"}
    connection = UpstreamConnection("canary", section, secrets=environ)
    async with connection.running():
        assert await connection.list_tools()
    seen = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    assert seen.get("SHARED_VAR") == "shared"
    assert CANARY not in seen and "PATH" not in seen and "HOME" not in seen
    assert set(seen) <= {"SHARED_VAR", "PWD", "SHLVL", "_", "OLDPWD"}  # what the shell itself sets


async def test_a_write_whose_answer_is_lost_settles_succeeded_by_its_lookup_without_a_second_write(
    filesystem_server: NodeServer, tmp_path: Path, redis: Redis, redis_url: str
) -> None:
    """The connection is cut after write_file reached the server (the file changed, the answer never came):
    the card is UNKNOWN, and the lookup (the file holds the approved content) settles it SUCCEEDED, sent once."""
    root = tmp_path / "files"
    root.mkdir()
    (root / "plan.txt").write_text("step one\n")
    marker = tmp_path / "cut-once"
    relay = (
        sys.executable,
        str(Path(__file__).parents[1] / "support" / "stdio_cut.py"),
        str(marker),
        "write_file",
        "--",
    )
    async with _fronting(filesystem_server, root, redis_url, relay=relay) as gateway:
        staff = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
        assert staff is not None
        arguments = {"path": str(root / "plan.txt"), "content": "step two\n"}
        card_id = (await gateway.executor.agent.execute(staff, "files_write_file", arguments)).for_model()["card_id"]
        await approve(gateway.ledger, card_id)
        await _run_worker(gateway, card_id)
        unknown = await gateway.ledger.get(card_id)
        assert marker.exists() and (root / "plan.txt").read_text() == "step two\n"
        assert unknown is not None and unknown.state is CardState.UNKNOWN
        with anyio.fail_after(30):  # the lookup waits for the session the supervisor opens again
            settled = await gateway.executor.writes.reconcile(card_id, worker="test")
        assert settled is not None and settled.state is CardState.SUCCEEDED
        events = await gateway.ledger.events(card_id)
        assert [event.type for event in events].count("dispatched") == 1
    # The file did not hold the new content when the card was proposed (its preview read it): the card says so.
    settlement = settlement_of(settled, events)
    assert settlement is not None and settlement.by is SettledBy.STATE_MATCH
    assert settlement.saw["held_at_proposal"] is False
    assert "did not at proposal: this write, or a change made since, made it so" in settlement.said


async def test_the_stdio_childs_stderr_reaches_the_gateway_log_under_the_upstreams_name(
    filesystem_server: NodeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's start-up line on its stderr is logged by the gateway, named by the upstream."""
    caplog.set_level(logging.INFO, logger="gateway.upstreams.connection.stderr")
    connection = UpstreamConnection("files", _section(filesystem_server, tmp_path, {}), secrets={})
    async with connection.running():
        assert await connection.list_tools()
        with anyio.fail_after(10):
            while not any("Secure MCP Filesystem Server" in r.getMessage() for r in caplog.records):
                await anyio.sleep(0.05)
    [line] = [r.getMessage() for r in caplog.records if "Secure MCP Filesystem Server" in r.getMessage()]
    assert line.startswith("upstream files: ")
