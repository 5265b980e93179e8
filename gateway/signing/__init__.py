"""The gateway's signatures: its key set, the identity it sends backends, the receipts of approved writes.

* `signer` — signing with the current key set, as every process on one Redis sees it;
* `identity` — the signed identity header a backend receives, and how it verifies one;
* `receipts` — the signed approval receipt of each approved write, and how a backend checks it.

May import: the store (signing keys), `gateway.tools`, `gateway.cards` and the vocabulary.
"""
