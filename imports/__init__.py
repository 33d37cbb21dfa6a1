"""``tally import``: history from another analytics tool (Plausible's CSV export) into
``imported.daily``, beside the views built from the log and never mixed into them
(docs/IMPORT-EXPORT.md)."""
