"""The facade: ``StateRepo`` and its capability namespaces (``repo.approvals``,
``repo.runs``). Opening a repository builds only the store and the reader; everything else
is made on first use.

May import: every package above it in the order (core ... remote).
"""
