"""The process around the layers: wiring, serving, the worker, and what runs in the background.

* `app` — the composition root: the only place that builds Redis clients, HTTP clients and layers;
* `serve` — ``countersign serve`` and ``countersign worker``: check, bind, run until a signal, stop;
* `background` — every background loop of a process, assembled in one place;
* `worker` — runs approved cards from the outbox and keeps every card's clock;
* `demo` — what only demo mode has: its backends, its expenses service, its keys;
* `stopping` — SIGINT and SIGTERM for a long-running command.

May import: everything in `gateway`, and (`app`, `serve`, `demo` only) the adapters and demo backends.
Nothing imports it but the command line.
"""
