"""Archiver: the Kafka consumer that keeps raw.pageviews and raw.rejected, exactly once."""
