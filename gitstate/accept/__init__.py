"""The one acceptance rule for commits this machine did not make (a pull, a clone, the
pre-receive hook): re-derive each foreign commit with this machine's own planners and refuse
it unless the result is byte-identical (rederive), main's namespace check (main) and who
may write what (trust). Every ref namespace (runs, threads, the refusal journal) checks its
foreign commits through this package.

May import: core, system, store, history, write, approvals.
"""
