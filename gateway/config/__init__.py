"""The operator's configuration: the TOML file as data, its sections, and the one `Settings` object.

* `settings` — `Settings`, read once at the edge (environment and file) and passed down, with the
  adapters, orgs and Redis deployment it builds from the file's sections;
* `file` — the TOML file, one pydantic model per section, unknown keys refused;
* `oauth`, `approvals`, `org_adapters`, `redis_target` — sections as plain data the layers read.

May import: the vocabulary, `gateway.limits`, `gateway.audit.formats`, `gateway.notifications.message`.
Only `gateway.__main__` reads the environment; everything else receives `Settings` or one of its parts.
"""
