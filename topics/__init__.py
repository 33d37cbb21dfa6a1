"""Kafka adapters the apps share: following a compacted topic (docs/ARCHITECTURE.md, "topics/")."""
