"""Ops: everything that runs or wires Tally (the CLI, the supervisor, the bundled broker, Maven setup, the scheduler).

Ops may import every app and the kernel; nothing imports ops except the entry points (``tally``,
``python -m tally``, ``python -m simulator``).
"""
