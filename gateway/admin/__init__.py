"""The admin REST API under ``/admin/api``: reading and deciding cards, as JSON.

* `api` — the routes; `bodies` — what a request may send and what an answer holds (pydantic models);
* `events` — ``GET /admin/api/cards/events``, server-sent events per changed card.

May import: `gateway.approvals`, `gateway.auth`, `gateway.web` and everything below. It decides nothing:
every decision goes through `gateway.approvals.service.CardService`.
"""
