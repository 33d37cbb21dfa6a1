"""Benchmarks: run with `make bench`; each prints its figures."""
