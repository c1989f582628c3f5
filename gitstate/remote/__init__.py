"""Push and pull of a whole agent: main, runs, threads and the refusal journal over a
remote, resumable after a kill, every arriving commit checked by the acceptance rule; and
the server-side git hooks.

May import: core, system, store, history, write, approvals, accept, runs, threads.
"""
