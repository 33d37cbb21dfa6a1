"""``tally import``: history from another analytics tool: Plausible's CSV export into
``imported.daily``, Umami's website export (a range's totals, no dates) into ``imported.ranges``;
beside the views built from the log and never mixed into them (docs/IMPORT-EXPORT.md)."""
