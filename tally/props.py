"""Custom properties as a dimension: the bounds of ``agg.props_1d`` and the rule that applies them.

``agg.props_1d`` holds, per site, UTC day, event name, property key and value, the number of
non-bot custom events and a visitors HLL sketch. Each event brings at most 20 properties, keys of
at most 64 characters and values of at most 256 (ingest refuses larger ones), so a day's rows
grow at most 20 per event. The reports bound them per site and day:

1. **Keys.** A day keeps the ``MAX_KEYS_PER_DAY`` keys carried by the most events of the site
   that day, over every event name (ties: the key that sorts first). Rows of the other keys are
   not shown that day.
2. **Values.** For each (site, day, event name, kept key), the ``MAX_VALUES_PER_KEY`` values with
   the most events stay (ties: the value that sorts first); the others fold into one
   ``OTHER_VALUE`` row: their events add up and their visitors sketches are unioned.

The fold is a function of one whole day's rows, which a streaming micro-batch never holds, so the
view stores the rows unfolded (stream and backfill write the same rows) and the reader applies the
fold (``query.aggregates.fold_props``). A range is folded day by day, then added up.
"""

from __future__ import annotations

MAX_KEYS_PER_DAY = 100  # per site and UTC day: the keys carried by the most events
MAX_VALUES_PER_KEY = 100  # per site, day, event name and key: the values with the most events
OTHER_VALUE = "(other)"  # the values past MAX_VALUES_PER_KEY, folded into one row
