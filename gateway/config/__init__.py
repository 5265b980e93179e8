"""The operator's configuration: the TOML file as data, its sections, and the one `Settings` object.

* `settings` — `Settings`, read once at the edge (environment and file) and passed down;
* `settings_parts` — the parts of `Settings` built from the file's sections (adapters, orgs, Redis);
* `file` — the TOML file, one pydantic model per section, unknown keys refused;
* `oauth`, `approvals`, `org_adapters`, `redis_target` — sections as plain data the layers read.

May import: the vocabulary, `gateway.limits`, `gateway.audit.formats`, `gateway.notifications.message`.
Only `gateway.__main__` reads the environment; everything else receives `Settings` or one of its parts.
"""
