"""Tally's kernel: the words every part shares (event schema, tables, dimensions, time spans,
settings, logging). The operator's CLI is ``ops/cli.py``; apps import this, never each other."""

__version__ = "0.1.0"
