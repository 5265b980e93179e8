"""Upstream MCP servers as a third kind of backend, beside built-in adapters and registered HTTP adapters.

* `connection` — a pool of supervised client sessions to an upstream (one stdio child with an allowlisted
  environment, or several Streamable HTTP sessions with the gateway's own token), each reconnected with backoff;
* `review` — the hash a person pins when reviewing a tool, and which listed tools are served or
  quarantined (with the diff a reviewer reads);
* `tool_reviews` — the reviews in force (the config file's, and those admins accept through the gateway, stored
  in `gateway.store.upstream_reviews`), and the admins' review: quarantined tools, suggestions, diffs, audited;
* `api` — its HTTP routes under ``/admin/api/upstreams``; `views` — what they answer;
* `tools` — an upstream's reviewed tools built into the same `Tool` declarations every other backend
  uses: reads through the access check with third-party output, writes as approval cards whose
  approved call is sent once, and whose unknown outcome is looked up by a read and a match rule.

Who uses it: the composition root connects each ``[upstreams.<name>]`` and hands the tools to the
executor with the others. It decides nothing the executor decides (access, approval, classification of
outcomes); it translates MCP into the tool vocabulary.

May import: the vocabulary (`gateway.tools`, `gateway.config`, `gateway.errors`, `gateway.audit`), `policies`,
`gateway.store` (its reviews) and the ``mcp`` client; `api` also the surfaces' `gateway.auth` and `gateway.web`.
"""
