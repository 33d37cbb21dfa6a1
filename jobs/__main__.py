"""``python -m jobs``: the streaming views job (the same as ``python -m jobs.streaming``), as ``tally up`` starts it."""

from jobs.streaming import main

if __name__ == "__main__":
    main()
