"""Tally: shared domain code (event schema, settings) and the operator CLI."""

__version__ = "0.1.0"
