"""The audit trail kept bounded in Redis, archived to files first, and checked end to end by its hash chain.

Real Redis (the quiet database: no gateway archives there), real files, the real CLI.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.archives.audit_archive import AuditArchive
from gateway.audit.chain import ChainHead
from gateway.audit.codec import OUTCOMES
from gateway.audit.events import AUDIT_STREAM, AuditEvent
from gateway.cli.main import main
from gateway.errors import AuditArchiveError, StoreUnavailableError
from gateway.store.audit_archiver import AuditArchiver
from gateway.store.audit_stream import RedisStreamAuditSink, audit_keys
from gateway.store.audit_trail import AuditTrail
from tests.support.audit_v1 import append_v1
from tests.support.examples import examples
from tests.support.redis_server import flushed_client
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

SECRET = TEST_AUDIT_SECRET.encode()
QUICK = settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


async def _record(sink: RedisStreamAuditSink, count: int, start: int = 0) -> None:
    for number in range(start, start + count):
        await sink.record(AuditEvent(action="tool.call", outcome="ok", tool=f"t{number}"))


async def _archive_all(archiver: AuditArchiver) -> None:
    for _bounded in range(10_000):
        if await archiver.archive_once() == 0:
            return
    raise AssertionError("archiving never finished")


def _cli(url: str, directory: Path, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    environ = {"COUNTERSIGN_REDIS_URL": url, "COUNTERSIGN_DATA_DIR": str(directory),
               "COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET}  # fmt: skip
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["audit", *args], environ)
    return status, out.getvalue(), err.getvalue()


async def _bounded_and_complete(url: str, directory: Path, count: int, keep: int, batch: int) -> None:
    async with flushed_client(url) as client:
        sink = RedisStreamAuditSink(client, secret=SECRET)
        archive = AuditArchive(directory / "audit")
        archiver = AuditArchiver(client, archive, keep_entries=keep, keep_minutes=0, batch=batch)
        await _record(sink, count // 2)
        await _archive_all(archiver)
        await _record(sink, count - count // 2, start=count // 2)
        await _archive_all(archiver)
        assert await client.xlen(AUDIT_STREAM) == min(count, keep)
        tools = [AuditEvent.from_fields(eid, fields).tool async for eid, fields in AuditTrail(sink, archive).entries()]
        assert tools == [f"t{n}" for n in range(count)]
        recent = await AuditTrail(sink, archive).recent(keep + 3)
        assert [e.tool for e in recent] == [f"t{n}" for n in range(count)][-(keep + 3) :]
        status, out, err = await anyio.to_thread.run_sync(lambda: _cli(url, directory, "verify"))
        assert status == 0, err
        status, out, _ = await anyio.to_thread.run_sync(
            lambda: _cli(url, directory, "tail", "-n", str(count), "--json")
        )
        assert [json.loads(line)["tool"] for line in out.splitlines()] == [f"t{n}" for n in range(count)]


@QUICK
@given(count=st.integers(1, 1500), keep=st.integers(0, 200), batch=st.integers(1, 1000))
def test_archive_and_trim_bound_the_stream_and_lose_nothing(
    quiet_redis_url: str, count: int, keep: int, batch: int
) -> None:
    """After many events and archive passes, Redis holds the retention; archive + stream hold each once, in order."""
    directory = Path(tempfile.mkdtemp())
    try:
        anyio.run(_bounded_and_complete, quiet_redis_url, directory, count, keep, batch)
    finally:
        shutil.rmtree(directory)


async def _tampered(url: str, directory: Path, count: int, keep: int, kind: str, pick: int) -> None:
    async with flushed_client(url) as client:
        sink = RedisStreamAuditSink(client, secret=SECRET)
        archive = AuditArchive(directory / "audit")
        await _record(sink, count)
        await _archive_all(AuditArchiver(client, archive, keep_entries=keep, keep_minutes=0, batch=7))
        status, _, err = await anyio.to_thread.run_sync(lambda: _cli(url, directory, "verify"))
        assert status == 0, err
        live = [
            (eid.decode(), {k.decode(): v.decode() for k, v in f.items()})
            for eid, f in await client.xrange(AUDIT_STREAM)
        ]
        archived = [line for path in archive.files() for line in path.read_text().splitlines()]
        named: str
        if kind in ("change-live", "delete-live"):
            # Not the newest entry: its removal is caught by the chain head instead (test below).
            index = pick % (len(live) - 1)
            entry_id, fields = live[index]
            await client.xdel(AUDIT_STREAM, entry_id)
            if kind == "change-live":  # no XADD edits a field in place: delete it and add it back changed
                await client.xadd(AUDIT_STREAM, {**fields, "o": OUTCOMES["deny"]})
            named = live[index + 1][0]  # the first entry whose predecessor is no longer the one it was chained to
        else:
            index = pick % len(archived)
            lines = list(archived)
            if kind == "edit-archive":
                record = json.loads(lines[index])
                record["fields"]["o"] = OUTCOMES["deny"]
                lines[index] = json.dumps(record)
                named = record["id"]
            else:  # swap two neighbouring lines
                index = min(index, len(lines) - 2)
                lines[index], lines[index + 1] = lines[index + 1], lines[index]
                named = json.loads(lines[index])["id"]
            for path in archive.files():
                path.unlink()
            rewritten = archive.draft([(json.loads(line)["id"], json.loads(line)["fields"]) for line in lines], "x")
            archive.commit(rewritten)
        status, out, err = await anyio.to_thread.run_sync(lambda: _cli(url, directory, "verify"))
        assert status == 1 and out == ""
        assert f"broken at entry {named} " in err, err


@QUICK
@given(
    count=st.integers(12, 60),
    kind=st.sampled_from(["change-live", "delete-live", "edit-archive", "reorder-archive"]),
    pick=st.integers(0, 10_000),
)
def test_verify_names_the_first_tampered_entry(quiet_redis_url: str, count: int, kind: str, pick: int) -> None:
    """A changed, deleted, edited or moved entry, live or archived, fails `audit verify`, which names it."""
    directory = Path(tempfile.mkdtemp())
    try:
        anyio.run(_tampered, quiet_redis_url, directory, count, 5, kind, pick)
    finally:
        shutil.rmtree(directory)


async def test_removing_the_newest_entries_is_caught_by_the_chain_head(quiet_redis_url: str, tmp_path: Path) -> None:
    """Truncating the trail's end leaves a chain that checks out entry by entry, but not against the head."""
    async with flushed_client(quiet_redis_url) as client:
        await _record(RedisStreamAuditSink(client, secret=SECRET), 5)
        [(newest, _fields)] = await client.xrevrange(AUDIT_STREAM, count=1)
        await client.xdel(AUDIT_STREAM, newest)
        status, _, err = await anyio.to_thread.run_sync(lambda: _cli(quiet_redis_url, tmp_path, "verify"))
    assert status == 1 and "chain head is at 5" in err


class _AppendsAsHeadIsRead(RedisStreamAuditSink):
    """A sink another process appends to just as `audit verify` reads the head, once (the live trail's race)."""

    appended = False

    async def sealed_head(self) -> tuple[ChainHead, str]:
        if not self.appended:
            self.appended = True
            await self.record(AuditEvent(action="tool.call", outcome="allow", subject="late@acme.example"))
        return await super().sealed_head()


async def test_entries_appended_while_the_trail_is_read_are_not_taken_for_truncation(
    quiet_redis_url: str, tmp_path: Path
) -> None:
    """An entry appended after the stream was read but before the head was is read too: the trail verifies, with it."""
    async with flushed_client(quiet_redis_url) as client:
        sink = _AppendsAsHeadIsRead(client, secret=SECRET)
        await _record(sink, 3)
        verdict = await AuditTrail(sink, AuditArchive(tmp_path)).verify(SECRET)
    assert verdict.broken is None and verdict.live == 4 and sink.appended


async def _truncate_to(client: Redis, keep: int, head: tuple[str, str, str, str]) -> None:
    """What someone with write access to Redis does to hide the newest entries: remove everything after entry
    `keep` and set the chain head to what it was then (`head`: mac, seq, id, seal, as they saw it then)."""
    for entry_id, _fields in await client.xrange(AUDIT_STREAM):
        if int(entry_id.decode().split("-")[1]) > keep:
            await client.xdel(AUDIT_STREAM, entry_id)
    mac, seq, entry_id, seal = head
    await client.hset(audit_keys(AUDIT_STREAM)["head"], mapping={"mac": mac, "seq": seq, "id": entry_id, "seal": seal})


async def _head_fields(client: Redis) -> tuple[str, str, str, str]:
    mac, seq, entry_id, seal = await client.hmget(audit_keys(AUDIT_STREAM)["head"], ["mac", "seq", "id", "seal"])
    return mac.decode(), seq.decode(), entry_id.decode(), seal.decode()


async def test_removing_the_tail_and_moving_the_head_back_unsealed_fails_verify(
    quiet_redis_url: str, tmp_path: Path
) -> None:
    """The head set to the last entry kept, from what the stream shows, carries no valid seal: verify fails."""
    async with flushed_client(quiet_redis_url) as client:
        await _record(RedisStreamAuditSink(client, secret=SECRET), 8)
        kept_id, kept = (await client.xrange(AUDIT_STREAM, count=5))[-1]
        kept_fields = {k.decode(): v.decode() for k, v in kept.items()}
        _mac, _seq, _id, seal = await _head_fields(client)
        await _truncate_to(client, 5, (kept_fields["m"], "5", kept_id.decode(), seal))
        status, _, err = await anyio.to_thread.run_sync(lambda: _cli(quiet_redis_url, tmp_path, "verify"))
    assert status == 1 and "seal does not match" in err, err


async def test_removing_the_tail_under_a_replayed_head_fails_verify_against_the_checkpoints(
    quiet_redis_url: str, tmp_path: Path
) -> None:
    """Someone who saw the sealed head at entry 5 later removes entries 6-12 and puts that head back: the chain
    and its head hold, but the archiver's checkpoint (written on its pass, in the archive directory) and the one
    `audit export --checkpoint` wrote both saw entry 12, and `audit verify` fails naming them."""
    async with flushed_client(quiet_redis_url) as client:
        sink = RedisStreamAuditSink(client, secret=SECRET)
        await _record(sink, 5)
        seen_at_5 = await _head_fields(client)
        await _record(sink, 7, start=5)
        exported = tmp_path / "export-checkpoint.json"
        status, out, err = await anyio.to_thread.run_sync(
            lambda: _cli(quiet_redis_url, tmp_path, "export", "--checkpoint", str(exported))
        )
        assert status == 0 and len(out.splitlines()) == 12 and json.loads(exported.read_text())["seq"] == 12, err
        archive = AuditArchive(tmp_path / "audit")
        await AuditArchiver(client, archive, keep_entries=100, keep_minutes=0).archive_once()
        assert archive.checkpoint() is not None and archive.checkpoint().seq == 12  # type: ignore[union-attr]
        status, _, err = await anyio.to_thread.run_sync(
            lambda: _cli(quiet_redis_url, tmp_path, "verify", "--checkpoint", str(exported))
        )
        assert status == 0, err
        await _truncate_to(client, 5, seen_at_5)
        status, _, err = await anyio.to_thread.run_sync(lambda: _cli(quiet_redis_url, tmp_path, "verify"))
        assert status == 1 and "checkpoint chain-checkpoint.json saw it reach 12" in err, err
        (tmp_path / "audit" / "chain-checkpoint.json").unlink()
        status, _, err = await anyio.to_thread.run_sync(
            lambda: _cli(quiet_redis_url, tmp_path, "verify", "--checkpoint", str(exported))
        )
        assert status == 1 and f"checkpoint {exported} saw it reach 12" in err, err


async def test_two_concurrent_archivers_archive_each_entry_once(quiet_redis_url: str, tmp_path: Path) -> None:
    """Two archivers (two processes' worth: own clients) racing over one stream and directory never duplicate."""
    async with flushed_client(quiet_redis_url) as client:
        sink = RedisStreamAuditSink(client, secret=SECRET)
        await _record(sink, 1200)
        archive = AuditArchive(tmp_path / "audit")
        others = [Redis.from_url(quiet_redis_url) for _ in range(2)]
        try:
            archivers = [AuditArchiver(c, archive, keep_entries=10, keep_minutes=0, batch=13) for c in others]
            async with anyio.create_task_group() as group:
                for archiver in archivers:
                    for _ in range(3):
                        group.start_soon(_archive_all, archiver)
                group.start_soon(_record, sink, 300, 1200)
            await _archive_all(archivers[0])
        finally:
            for other in others:
                await other.aclose()
        ids = [entry_id for (entry_id, _f), _where in archive.entries()]
        assert len(ids) == len(set(ids)) == 1500 - 10
        assert archive.drafts() == []
        tools = [AuditEvent.from_fields(eid, fields).tool async for eid, fields in AuditTrail(sink, archive).entries()]
        assert tools == [f"t{n}" for n in range(1500)]
        assert (await AuditTrail(sink, archive).verify(SECRET)).broken is None
        assert await client.exists(audit_keys(AUDIT_STREAM)["archiver"]) == 0


async def test_a_trail_of_old_entries_then_compact_ones_archives_verifies_and_exports_as_one(
    quiet_redis_url: str, tmp_path: Path
) -> None:
    """An upgraded gateway goes on with the chain it finds: archive, `verify`, `export` and `tail` read
    both versions, with the same logical fields, and a changed old entry is still caught."""
    async with flushed_client(quiet_redis_url) as client:
        for number in range(6):
            await append_v1(client, SECRET, AuditEvent(action="tool.call", outcome="ok", tool=f"t{number}",
                                                       extra={"card_id": f"crd_1_{number:032x}"}))  # fmt: skip
        sink = RedisStreamAuditSink(client, secret=SECRET)
        await _record(sink, 6, start=6)
        archive = AuditArchive(tmp_path / "audit")
        await _archive_all(AuditArchiver(client, archive, keep_entries=3, keep_minutes=0, batch=4))
        archived = [fields for (_id, fields), _where in archive.entries()]
        assert ["mac" in fields for fields in archived] == [True] * 6 + [False] * 3  # both versions archived
        status, out, err = await anyio.to_thread.run_sync(lambda: _cli(quiet_redis_url, tmp_path, "verify"))
        assert status == 0 and "9 archived and 3 live" in out, err
        status, out, _ = await anyio.to_thread.run_sync(lambda: _cli(quiet_redis_url, tmp_path, "export"))
        exported = [json.loads(line) for line in out.splitlines()]
        assert [line["tool"] for line in exported] == [f"t{n}" for n in range(12)]
        assert all(set(line) == {"id", "action", "outcome", "tool"} for line in exported[6:])
        assert [json.loads(line["extra"])["card_id"] for line in exported[:6]] == [f"crd_1_{n:032x}" for n in range(6)]
        status, out, _ = await anyio.to_thread.run_sync(lambda: _cli(quiet_redis_url, tmp_path, "export", "--format",
                                                                     "ocsf"))  # fmt: skip
        unmapped = [json.loads(line)["unmapped"] for line in out.splitlines()]
        assert [int(u["seq"]) for u in unmapped] == list(range(1, 13)) and all(u["mac"] for u in unmapped)
        status, out, _ = await anyio.to_thread.run_sync(lambda: _cli(quiet_redis_url, tmp_path, "tail", "-n", "12",
                                                                     "--json"))  # fmt: skip
        assert [json.loads(line)["tool"] for line in out.splitlines()] == [f"t{n}" for n in range(12)]
        lines = archive.files()[0].read_text().splitlines()
        record = json.loads(lines[2])
        record["fields"]["outcome"] = "deny"
        lines[2] = json.dumps(record)
        archive.files()[0].write_text("\n".join(lines) + "\n")
        status, _, err = await anyio.to_thread.run_sync(lambda: _cli(quiet_redis_url, tmp_path, "verify"))
    assert status == 1 and f"broken at entry {record['id']} " in err


async def test_an_entry_after_a_later_id_than_the_clock_takes_its_number_as_a_field(
    quiet_redis_url: str, tmp_path: Path
) -> None:
    """A stream holding an id past the chain's (written by something else) still takes the next entry:
    appended with ``*``, its number in ``q``; `verify` names the foreign entry, and without it the chain holds."""
    async with flushed_client(quiet_redis_url) as client:
        sink = RedisStreamAuditSink(client, secret=SECRET)
        await _record(sink, 2)
        foreign = "99999999999999-0"
        await client.xadd(AUDIT_STREAM, {"a": "1", "m": "forged"}, id=foreign)
        assert await sink.record(AuditEvent(action="tool.call", outcome="ok", tool="t2"))
        entries = await sink.entries("", 10)
        assert entries[-1][1]["q"] == "3" and entries[-1][0] > foreign
        trail = AuditTrail(sink, AuditArchive(tmp_path / "audit"))
        verdict = await trail.verify(SECRET)
        assert verdict.broken is not None and verdict.broken.entry_id == foreign
        await client.xdel(AUDIT_STREAM, foreign)
        assert (await trail.verify(SECRET)).broken is None
        assert [e.tool for e in await trail.recent(3)] == ["t0", "t1", "t2"]


async def test_a_disk_failure_of_the_archive_is_an_archive_error_naming_the_file(
    quiet_redis_url: str, tmp_path: Path
) -> None:
    """An archive directory under a regular file cannot be made: the pass fails with an `AuditArchiveError`
    naming that path (its `NotADirectoryError` the cause), not as a Redis failure, and nothing is trimmed."""
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the archive should be")
    async with flushed_client(quiet_redis_url) as client:
        sink = RedisStreamAuditSink(client, secret=SECRET)
        archiver = AuditArchiver(client, AuditArchive(blocked / "audit"), keep_entries=0, keep_minutes=0)
        await _record(sink, 3)
        with pytest.raises(AuditArchiveError) as raised:
            await archiver.archive_once()
        assert not isinstance(raised.value, StoreUnavailableError)
        assert raised.value.path == blocked / "audit"
        assert str(blocked / "audit") in str(raised.value)
        assert isinstance(raised.value.__cause__, NotADirectoryError)
        assert await client.xlen(AUDIT_STREAM) == 3
        assert await archiver.checkpoint() == ""
