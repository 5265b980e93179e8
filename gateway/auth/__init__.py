"""Who is calling, at the HTTP surfaces: bearer keys and OAuth access tokens, as ASGI middleware.

* `bearer` — the middleware: a key or a token becomes a `Principal`, or a refusal;
* `tokens` — OAuth 2.1 access tokens (JWTs) of trusted issuers, verified and mapped;
* `jwks` — an issuer's signing keys, fetched and cached;
* `oauth_resource` — the gateway as an OAuth protected resource: metadata and scope challenge.

May import: the store (keys), `gateway.web`, `gateway.limits` and the vocabulary. Who uses it: every surface.
"""
