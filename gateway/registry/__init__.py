"""Adapters that services register by manifest: one home for the whole feature.

* `manifest` — what a service sends (pydantic models), and the texts of it that reach the model;
* `schema` — a manifest's JSON Schemas compiled into the closed pydantic models tools validate with;
* `tools` — a manifest compiled into the same `Tool` declarations in-process adapters export;
* `service` — registration, review, acceptance and removal, audited (its state is
  `gateway.store.registrations`);
* `live` — the `LiveToolSource`: in-process tools plus every pinned manifest's, rebuilt on change;
* `api` — the HTTP routes for services (register, status) and admins (review, accept, remove);
* `openapi_import` — a draft manifest from a service's OpenAPI document (the CLI's import command).

May import: the vocabulary, `gateway.store` (its registrations), `gateway.signing` (the identity a
registered backend receives) and `policies`; `api` also the surfaces' `gateway.auth` and `gateway.web`.
Who calls it: the composition root, the registry API, and the CLI's ``adapters`` commands.
"""
