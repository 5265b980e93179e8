"""The gateway's HTTP clients toward the world: business backends and webhooks, on aiohttp.

* `backend_client` — `AiohttpUpstream`, the `UpstreamClient` of one business backend;
* `webhook` — posting one signed JSON body to a webhook (notifications and the live audit export).

May import: the vocabulary and `gateway.telemetry`. Only the composition root builds them.
"""
