"""Per-principal limits as data, and rate budgets as the executor and the auth edge see them.

* `budgets` — the ``[limits]`` section: `Budget`, `OrgLimits`, `Limits`;
* `rate_limiter` — the `RateLimiter` Protocol, GCRA, and an in-memory limiter.

May import: the vocabulary. The Redis limiter is `gateway.store.rate_buckets`; which budgets a call
charges is `policies.charges`.
"""
