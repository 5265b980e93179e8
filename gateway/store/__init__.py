"""Everything that talks to Redis, and the boundary where Redis failures become gateway errors.

`client.connect` builds the gateway's Redis client; the ledger (`ledger`, with its Lua scripts in
`ledger_scripts`), the confirmation of every transition as durable and its cached guard
(`durability`), the key store (`keys`), the audit stream (`audit`), the adapter registry
(`registry`) and the embedded server (`embedded`) each own their keys. No module outside this
package imports `redis` or catches its exceptions: a store method that cannot reach Redis raises
`gateway.errors.StoreUnavailableError`.
"""
