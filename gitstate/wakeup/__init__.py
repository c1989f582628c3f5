"""The wake-up fast path: the prompt section rendered from the working tree for every
wake-up hook, importing as little as possible (its import cost is pinned by a test), and
the slow path it falls back on, which reads through the store (``slowpath.py``).

May import: core, system, and, inside the functions that leave the fast path (a receipt, a
run's block, a stale stamp), history, runs and api.
"""
