"""The chain read back: what the repository remembers and how it is replayed.

Owns the projection of git log into working_state_history.jsonl, the replay of a change onto
a state, the state reader at any commit, the approval records that left the key table (read
back from history), the refusal journal, its records and its backlog, the wake-up receipts
and the redaction record.

May import: core, system, store.
"""
