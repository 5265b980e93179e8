"""The process's instruments: Prometheus metrics, OpenTelemetry traces, and log output.

* `metrics` — the instruments and the text a scrape gets; `tracing` — spans, a no-op until configured;
* `logs` — plain or JSON log lines; `log_context` — the key id a log record is about.

May import: the vocabulary and its I/O libraries (prometheus-client, OpenTelemetry). It stands below
every layer that counts or traces, so every layer may import it.
"""
