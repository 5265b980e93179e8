"""The process around the layers: wiring, serving, the worker, and what runs in the background.

* `app` — the composition root: the only place that builds Redis clients, HTTP clients and layers;
* `serve` — ``countersign serve`` and ``countersign worker``: check, bind, run until a signal, stop;
* `background` — every background loop of a process, assembled in one place;
* `worker` — runs approved cards from the outbox and keeps every card's clock;
* `demo` — what only demo mode has: its backends, its expenses service, its keys;
* `stopping` — SIGINT and SIGTERM for a long-running command, and the uvicorn server that leaves them alone.

May import: everything in `gateway`; `app` the adapters it loads, `demo` the demo backends it starts.
Nothing in `gateway` imports it but the command line; `backends.serve` runs its servers as `stopping.QuietServer`.
"""
