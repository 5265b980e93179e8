"""An admin's decisions on cards: the one service every surface decides through.

* `service` — `CardService`: approve, reject, resolve, cancel and watch, each audited;
* `batch` — a reviewed list of cards, each decided on its own;
* `watch` — one admin's view of the ledger's changes (the live console and the event stream).

May import: the vocabulary, `gateway.cards`, `gateway.audit`, the store's Protocols, `policies`. Who calls
it: the admin API, the console's event stream and the CLI. It knows no transport.
"""
