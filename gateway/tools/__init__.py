"""The tool vocabulary: what a tool is, what it receives, what it answers, and who sees it.

* `declarations` — `Tool`, `Access`, `Approval`, `WriteContract`: a tool as an adapter declares it;
* `context` — the `ToolContext` an adapter's `execute` receives besides its arguments;
* `upstream` — the `UpstreamClient` Protocol an adapter calls its backend through, and its answer;
* `backend_http` — calling a backend from an adapter: paths, status mapping, keyed write contracts;
* `preview` — what a write will change, read when it is proposed;
* `output_schema` — the ``outputSchema`` a tool is listed with;
* `toolbox` — the immutable name -> `Tool` mapping one gateway serves;
* `catalog` — the per-caller catalog (the layer above the vocabulary: it filters through `policies.access`).

May import: the vocabulary at the top of `gateway`, `gateway.cards`, `gateway.config`, `policies`; no I/O
library. Who uses it: adapters (through `gateway`'s exports), the executor, the registry and the MCP surface.
"""
