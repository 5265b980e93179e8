"""The ledger in Redis: approval cards, every transition one atomic Lua script.

* `redis_ledger` — `RedisLedger`, the `gateway.cards.contract.Ledger` on Redis;
* `scripts`, `prelude`, `history` — the Lua: one script per transition after a shared prelude;
* `codec`, `packing`, `rows` — a card's stored form, and the Python reader of it;
* `layout` — where a card lives: its shard and the names of its keys;
* `outbox` — the stream per shard the worker reads; `changes` — the pub/sub feed of saved cards;
* `pages` — paging an org's cards; `retention` — finished cards leave for the card archive;
* `telemetry` — a span and a count per transition.

May import: `gateway.store.client`, `gateway.cards` and the vocabulary. Who uses it: the composition root.
"""
