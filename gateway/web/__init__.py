"""What every HTTP surface shares: the root ASGI app, declared route tables, the console, request telemetry.

* `root_app` — ``/mcp`` straight to its endpoint (`gateway.mcp.stack`), the rest through Starlette;
* `route_table` — declared routes: a JSON API's Starlette routes and its OpenAPI document from one table;
* `console` — the admin web console's static page and assets (``console_assets/``);
* `request_telemetry` — a span per admin, registry and operations request, and the access log;
* `asgi_replay` — giving an ASGI app again the body a middleware already read.

May import: the layers below the surfaces. Who uses it: the composition root and the other surfaces.
"""
