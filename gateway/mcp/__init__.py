"""The MCP surface: ``/mcp`` over Streamable HTTP, on the official SDK's low-level `Server`.

* `surface` — the SDK server: ``tools/list`` from the catalog, ``tools/call`` into the executor;
* `stack` — the ``/mcp`` endpoint: every layer in front of the SDK, assembled in one expression;
* `edge` — what the transport refuses that the SDK lets through (headers, bodies, message shapes);
* `headers` — the header lines of one request, read once for every layer of the edge;
* `budget_front` — a ``tools/call`` whose rate budget is spent never reaches the SDK;
* `flood_audit` — refusals of a flood, audited in aggregate;
* `sessions` — sessions per key, within a quota;
* `tasks` — write proposals answered as MCP tasks, and ``tasks/*``, in both protocol eras;
* `apps` — MCP Apps views (``io.modelcontextprotocol/ui``): views named in listings and results, the
  ``ui://`` resources (``view_assets/``), the app-only tools handed to the executor's view path;
* `extensions` — which extensions the client of a request declared, in either era.

May import: the executor, the catalog, `gateway.auth` and everything below. It decides nothing.
"""
