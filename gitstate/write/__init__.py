"""The write side: one audited commit per tool call.

Owns the engine (lock, compare-and-swap against HEAD, commit, refusal record), the planners
of every operation, request ids, the main tree writer, the checks every write passes,
revert, promotion of a run's result to a key, and maintenance (gc, repack) that never
destroys a write.

May import: core, system, store, history.
"""
