"""Telling the people who can act on a card: what a notification says, when one is due, how it is delivered.

* `message` — what a notification says and how it is signed, and the ``[notifications]`` section as data;
* `card_alerts` — a `Ledger` wrapper that enqueues a notification after each transition worth one;
* `expiry_warnings` — a scan for cards about to expire undecided;
* `delivery` — the loop that posts due notifications and reschedules failures (a background driver).

May import: the vocabulary, `gateway.cards`, `gateway.audit`, the store and `policies`. Who runs it: the
composition root wires it; `gateway.runtime.background` runs its loops.
"""
