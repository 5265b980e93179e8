"""The ledger in Redis: approval cards, every transition one atomic Lua script.

* `redis_ledger` — `RedisLedger`, the `gateway.cards.contract.Ledger` on Redis;
* `scripts` — the Lua: one script per transition after a shared prelude, which holds the card's
  bounded, hash-chained history;
* `codec` — a card's stored form (compact, MessagePack), its Lua writer and reader, and the Python
  readers that make a `Card` of it;
* `layout` — where a card lives: its shard and the names of its keys;
* `outbox` — the stream per shard the worker reads; `changes` — the pub/sub feed of saved cards;
* `pages` — paging an org's cards; `retention` — finished cards leave for the card archive;
* `telemetry` — a span and a count per transition.

May import: `gateway.store.client`, `gateway.store.durability`, `gateway.cards`, `gateway.archives`,
`gateway.audit`, `gateway.telemetry`, `gateway.limits`, `gateway.config` and the vocabulary. Who uses
it: the composition root.
"""
