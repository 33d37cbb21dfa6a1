"""Jobs: Spark views derived from the event log (streaming) and from raw.pageviews (backfill)."""
