"""LangGraph thread refs as a namespace of the state repository
(``refs/gitstate/threads/<thread>/<ns>/checkpoints``): the checkpoint commit format, the
journal of pending writes, the acceptance check of foreign thread commits, the strict value
check and push/pull of threads. The saver that writes them is the langgraph adapter.

May import: core, system, store, history, write, approvals, accept.
"""
