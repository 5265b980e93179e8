"""Everything that talks to Redis, and the boundary where Redis failures become gateway errors.

* `client` — `connect` builds the gateway's Redis client; `store_boundary` is the boundary;
* `ledger/` — approval cards and their Lua scripts (its own docstring lists its modules);
* `durability` — the confirmation of every transition as durable, and its cached guard;
* the audit trail: `audit_stream` (the hash-chained stream, the `AuditSink`), `audit_archiver` (old
  entries to the archive files, then trimmed), `audit_trail` (archive and stream read as one) and
  `audit_export` (where the live export stands);
* `keys` (API keys), `signing_keys` (the receipts' key set), `registrations` (registered adapters),
  `rate_buckets` (rate budgets), `notification_outbox` (deliveries), `call_history` (recent reads),
  `view_handles` (single-use handles to a read's human render, for MCP Apps views);
* `probes` — what operators ask: gauges and readiness; `embedded` — the embedded server.

No module outside this package imports `redis` or catches its exceptions: a store method that
cannot reach Redis raises `gateway.errors.StoreUnavailableError`. The boundary translates only what
it owns, Redis and socket failures (`client.REDIS_FAILURES`); a disk failure of the archives the
store writes through is their own `gateway.errors.ArchiveError`, naming the file.

May import: `redis`, the vocabulary, `gateway.cards`, `gateway.audit`, `gateway.archives`,
`gateway.telemetry`, `gateway.config`, `gateway.limits`, `policies`. Who uses it: the composition root
builds it; the layers above see its Protocols.
"""
