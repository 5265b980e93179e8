"""The MCP surface: ``/mcp`` over Streamable HTTP, on the official SDK's low-level `Server`.

* `surface` — the SDK server: ``tools/list`` from the catalog, ``tools/call`` into the executor;
* `stack` — the ``/mcp`` endpoint: every layer in front of the SDK, assembled in one expression;
* `edge` — what the transport refuses that the SDK lets through (headers, bodies, message shapes);
* `headers` — the header lines of one request, read once for every layer of the edge;
* `budget_front` — a ``tools/call`` whose rate budget is spent never reaches the SDK;
* `flood_audit` — refusals of a flood, audited in aggregate;
* `sessions` — sessions per key, within a quota;
* `tasks` — write proposals answered as MCP tasks, and ``tasks/*``, in both protocol eras.

May import: the executor, the catalog, `gateway.auth` and everything below. It decides nothing.
"""
