"""The main module of a pytest-xdist worker as multiprocessing sees it (tests/conftest.py): empty."""
