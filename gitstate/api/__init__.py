"""The facade: ``StateRepo`` and its capability namespaces, each built on first use:
``repo.approvals``, ``repo.runs``, ``repo.remote`` and ``repo.observations``. Opening a
repository builds the store, the reader, the main tree and the write engine, nothing else
(tests/api/test_facade.py); views.py computes its reads, create.py makes a repository.

May import: every package before it in the order (core ... remote).
"""
