"""Quality: data-quality suites and the reconciliation audit (Kafka = raw = aggregates).

Code map:

- ``contracts`` — what each table must look like (pure); ``suites`` — the GX suites built from them;
- ``checks`` — ``tally check``: validate partitions, record results, quarantine, alert;
- ``kafka_raw``, ``raw_views``, ``findings`` — the audit's comparisons (pure);
- ``kafka_log`` — the bounded read of the topic; ``audit`` — ``tally audit``: run, report, record;
- ``store``, ``quarantine`` — the Delta tables ``quality.results``, ``quality.audits``,
  ``quality.partitions`` (delta-rs); ``quarantine.quarantined`` is what the dashboard reads;
- ``commands`` — the CLI's arguments and handlers.
"""
