"""The query layer: every figure the dashboard and the Stats API show is computed here, once.

Aggregate tables answer when a question fits them (:mod:`query.aggregates`), raw events
otherwise (:mod:`query.raw`, exact); :mod:`query.engine` answers a :class:`query.spec.Query`
through either. A library below the apps and above the kernel: it imports no app.
"""
