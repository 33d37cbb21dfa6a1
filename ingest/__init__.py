"""Ingest: the ASGI endpoint that validates, enriches and appends beacons to Kafka."""
