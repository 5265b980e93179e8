"""Everything that talks to Redis, and the boundary where Redis failures become gateway errors.

`client.connect` builds the gateway's Redis client; the ledger (`ledger/`, with its Lua scripts), the
confirmation of every transition as durable and its cached guard (`durability`), the key store
(`keys`), the audit stream (`audit_stream`, `audit_archiver`, `audit_trail`, `audit_export`), rate
budgets (`rate_buckets`), the notification outbox (`notification_outbox`), registered adapters
(`registrations`), the signing keys (`signing_keys`), recent reads (`call_history`), the operators'
probes (`probes`) and the embedded server (`embedded`) each own their keys. No module outside this
package imports `redis` or catches its exceptions: a store method that cannot reach Redis raises
`gateway.errors.StoreUnavailableError`.

May import: `redis`, the vocabulary, `gateway.cards`, `gateway.audit`, `gateway.archives`,
`gateway.telemetry`. Who uses it: the composition root builds it; the layers above see its Protocols.
"""
