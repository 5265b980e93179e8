"""Cards as the ledger saves them, heard on its pub/sub channel: the feed behind the live console.

Who calls it: `gateway.approvals.service.CardService.watch`, for the admin API's event stream. Every
ledger script that saves a card publishes the card's id, org, state and version on
`CHANGES_CHANNEL` in the same script (`gateway.store.ledger.scripts`), on the Redis every gateway
process and worker shares, so a change made anywhere reaches every subscriber. Each subscription
holds one connection of the client it is given (the blocking one: a wait for the next message is
bounded by its own timeout, not the socket's). Pub/sub keeps nothing for a subscriber that is not
listening; readers load the current state after subscribing (`gateway.cards.contract.CardChanges`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub

from gateway.cards.contract import CardChange
from gateway.errors import StoreUnavailableError
from gateway.store.client import store_boundary
from gateway.store.ledger.layout import CHANGES_CHANNEL

__all__ = ["SUBSCRIBE_SECONDS", "RedisCardChanges"]

SUBSCRIBE_SECONDS = 2.0
"""How long the server may take to confirm a subscription."""


class RedisCardChanges:
    """`gateway.cards.contract.CardChanges` over Redis pub/sub."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[_Subscription]:
        """Subscribed once entered; unsubscribed, and its connection returned, on exit.

        Raises:
            StoreUnavailableError: Redis could not be reached to subscribe.
        """
        pubsub: PubSub = self._client.pubsub()
        subscription = _Subscription(pubsub)
        try:
            await subscription.start()
            yield subscription
        finally:
            with contextlib.suppress(StoreUnavailableError):
                await subscription.close()


@store_boundary
class _Subscription:
    def __init__(self, pubsub: PubSub) -> None:
        self._pubsub = pubsub

    async def start(self) -> None:
        await self._pubsub.subscribe(CHANGES_CHANNEL)
        # redis-py sends SUBSCRIBE without reading its answer: read it here, so that a subscription the
        # server refuses (an ACL without the channel) fails now, not as a stream that never says anything.
        confirmed: Any = await self._pubsub.get_message(timeout=SUBSCRIBE_SECONDS)
        if confirmed is None or confirmed.get("type") != "subscribe":
            raise TimeoutError(f"no confirmation of the subscription within {SUBSCRIBE_SECONDS} s")

    async def next_change(self, timeout: float) -> CardChange | None:
        message: Any = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout)
        if message is None or message.get("type") != "message":
            return None
        try:
            fields = json.loads(message["data"])
            return CardChange(
                card_id=str(fields["card_id"]),
                org=str(fields["org"]),
                state=str(fields["state"]),
                version=int(fields["version"]),
            )
        except (ValueError, KeyError, TypeError):
            return None  # not the ledger's message: someone else published on the channel

    async def close(self) -> None:
        # (Untyped before redis 8.2, typed since: the ignore serves both.)
        await self._pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
