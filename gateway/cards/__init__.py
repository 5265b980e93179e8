"""Approval cards as data: what a write proposal becomes, the states it moves through, and how it is shown.

* `card` — `Card`, `CardState`, `CardEvent` and the hash chain of a card's history;
* `transitions` — the state machine, written once as a table the Lua scripts and the tests read;
* `contract` — the `Ledger` Protocol: what a card store must do, as the executor, approvals and worker see it;
* `views` — what agents and admins see of a card; `words` — what happened to it, said plainly;
* `task_states` — what a card's state means to an agent following it as an MCP task.
* `overview` — an org's cards at a glance (per hour, time to approval, open by age, writes), for the console.

May import: the vocabulary at the top of `gateway`, `gateway.tools`, `gateway.config`, `policies`; no I/O
library. Who uses it: every layer; the Redis implementation of `contract` is `gateway.store.ledger`.
"""
