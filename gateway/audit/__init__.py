"""The audit trail as data: an event, the hash chain over the trail, how entries are stored and exported.

* `events` — `AuditEvent`, the `AuditSink` Protocol and an in-memory sink;
* `chain` — how each entry's MAC is made and how a whole trail is checked; `codec` — an entry's stored form;
* `formats` — the export formats (our JSON lines, OCSF) and the ``[audit_export]`` target;
* `secret` — the chain's key, as every process that appends or verifies gets it (read at the edge);
* `forwarder` — the live export, a background driver that posts new entries to a collector.
* `aggregate` — what a count of alike events holds, and the loop that writes such counts (task polls,
  edge refusals).

May import: the vocabulary and `policies`; `secret` also the settings, `forwarder` the store, the
outbound webhook and the metrics (its lag). The Redis stream is `gateway.store.audit_stream`; the
archive files `gateway.archives`.
"""
