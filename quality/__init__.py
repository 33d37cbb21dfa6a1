"""Quality: data-quality suites and the reconciliation audit (Kafka = raw = aggregates)."""
