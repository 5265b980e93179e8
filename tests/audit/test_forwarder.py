"""The live audit export against a real receiver (Starlette under uvicorn) and a real Redis.

The receiver refuses the first batch: the cursor stays, the batch is sent again, then the rest
follows in order, archive included, each batch signed like a notification.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.archives.audit_archive import AuditArchive
from gateway.audit.chain import Checkpoint
from gateway.audit.events import AuditEvent
from gateway.audit.formats import AuditExportTarget
from gateway.audit.forwarder import CHECKPOINT_HEADER, AuditForwarder
from gateway.errors import UpstreamError
from gateway.notifications.message import ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from gateway.outbound.webhook import WebhookPoster
from gateway.store.audit_archiver import AuditArchiver
from gateway.store.audit_export import AuditExportCursor
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.audit_trail import AuditTrail
from gateway.telemetry.metrics import REGISTRY
from tests.support.receiver import Receiver
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

SECRET = "export-secret-0123456789"


def _backlog() -> float:
    value = REGISTRY.get_sample_value("countersign_audit_export_backlog_seconds")
    assert value is not None
    return value


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    hook = Receiver()
    with serve_app_in_thread(hook.app()) as base:
        yield hook, f"{base}/hook"


async def test_every_entry_reaches_the_receiver_once_acknowledged_in_order_and_signed(
    quiet: Redis, receiver: tuple[Receiver, str], tmp_path: Path
) -> None:
    hook, url = receiver
    hook.fail_first = 1
    sink = RedisStreamAuditSink(quiet, secret=TEST_AUDIT_SECRET.encode())
    for number in range(5):
        await sink.record(AuditEvent(action="key.create", outcome="ok", subject=f"s{number}"))
    archive = AuditArchive(tmp_path / "audit")
    assert await AuditArchiver(quiet, archive, keep_entries=2, keep_minutes=0).archive_once() == 3
    cursor = AuditExportCursor(quiet)
    poster = WebhookPoster(timeout_seconds=5)
    forwarder = AuditForwarder(AuditTrail(sink, archive), cursor, AuditExportTarget(url=url, secret=SECRET, batch=2,
                               format="ocsf"), poster, product_version="9.9")  # fmt: skip
    try:
        with pytest.raises(UpstreamError):
            await forwarder.forward_due()  # refused: nothing acknowledged
        assert await cursor.position() == ""
        assert _backlog() > 0  # the refused batch's oldest entry is waiting
        assert await forwarder.forward_due() == 5
        await sink.record(AuditEvent(action="card.approve", outcome="ok", subject="late"))
        assert await forwarder.forward_due() == 1
        assert await forwarder.forward_due() == 0
        assert _backlog() == 0  # caught up
    finally:
        await poster.aclose()
    refused, *taken = hook.received
    assert refused.status == 503 and refused.body == taken[0].body  # the same batch again
    lines = [json.loads(line) for request in taken for line in request.body.splitlines()]
    assert [line["actor"]["user"]["name"] for line in lines] == ["s0", "s1", "s2", "s3", "s4", "late"]
    assert [len(r.body.splitlines()) for r in taken] == [2, 2, 1, 1]  # archive, archive+stream, stream
    ids = [line["metadata"]["uid"] for line in lines]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-")))) and len(set(ids)) == 6
    assert await cursor.position() == ids[-1]
    for request in hook.received:
        stamp = int(request.headers[TIMESTAMP_HEADER.lower()])
        assert verify(SECRET, stamp, request.body, request.headers[SIGNATURE_HEADER.lower()], now=int(time.time()))
        assert request.headers[ID_HEADER.lower()].startswith("aud_")


async def test_only_the_lease_holder_exports(quiet: Redis, receiver: tuple[Receiver, str], tmp_path: Path) -> None:
    """A second process sends nothing while the first holds the lease."""
    hook, url = receiver
    sink = RedisStreamAuditSink(quiet, secret=TEST_AUDIT_SECRET.encode())
    await sink.record(AuditEvent(action="key.create", outcome="ok"))
    trail, target = AuditTrail(sink, AuditArchive(tmp_path)), AuditExportTarget(url=url, secret=SECRET)
    poster = WebhookPoster(timeout_seconds=5)
    first = AuditForwarder(trail, AuditExportCursor(quiet), target, poster, product_version="1")
    second = AuditForwarder(trail, AuditExportCursor(quiet), target, poster, product_version="1")
    try:
        assert await first.forward_due() == 1
        await sink.record(AuditEvent(action="key.revoke", outcome="ok"))
        assert await second.forward_due() == 0
        assert await first.forward_due() == 1
    finally:
        await poster.aclose()
    assert len(hook.received) == 2


async def test_a_batch_ending_at_the_head_carries_its_sealed_checkpoint_which_finds_the_tail_removed(
    quiet: Redis, receiver: tuple[Receiver, str], tmp_path: Path
) -> None:
    """The receiver gets the sealed head with the batch that reaches it. Someone with Redis access who kept an
    earlier sealed head removes the newest entry and puts that head back: the trail alone verifies, and with the
    forwarded checkpoint it does not (its newest entries were removed)."""
    hook, url = receiver
    secret = TEST_AUDIT_SECRET.encode()
    sink = RedisStreamAuditSink(quiet, secret=secret)
    for number in range(3):
        await sink.record(AuditEvent(action="key.create", outcome="ok", subject=f"s{number}"))
    head_key = "{countersign:audit}:head"
    earlier_head = await quiet.hgetall(head_key)
    await sink.record(AuditEvent(action="card.approve", outcome="ok", subject="last"))
    trail = AuditTrail(sink, AuditArchive(tmp_path / "audit"))
    poster = WebhookPoster(timeout_seconds=5)
    forwarder = AuditForwarder(trail, AuditExportCursor(quiet), AuditExportTarget(url=url, secret=SECRET),
                               poster, product_version="1")  # fmt: skip
    try:
        assert await forwarder.forward_due() == 4
    finally:
        await poster.aclose()
    [batch] = hook.received
    last_id = json.loads(batch.body.splitlines()[-1])["id"]
    checkpoint = Checkpoint.from_json(batch.headers[CHECKPOINT_HEADER.lower()])
    assert checkpoint.id == last_id and checkpoint.seq == 4 and checkpoint.sealed(secret)
    assert (await trail.verify(secret, {"forwarded": checkpoint})).broken is None

    await quiet.xdel("countersign:audit", last_id)
    await quiet.delete(head_key)
    await quiet.hset(head_key, mapping=earlier_head)
    assert (await trail.verify(secret)).broken is None  # the gap the forwarded checkpoint closes
    broken = (await trail.verify(secret, {"forwarded": checkpoint})).broken
    assert broken is not None and "newest entries were removed" in broken.reason
