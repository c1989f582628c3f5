"""The server side of a remote: ``verify_push``, what a (bare) server repository's
pre-receive hook runs for each pushed ref update. Each namespace a remote holds is checked
by its own rule: main by the acceptance rule for foreign commits (gitstate/accept/main.py),
a run ledger by its replay (gitstate/runs/sync.py), a LangGraph thread by the thread rule
(gitstate/threads/sync.py), the refusal journal by its grow-only check; any other ref name
is refused. Who may claim a role is the server's own trust configuration.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..accept import main as foreign
from ..core import layout
from ..core.layout import BRANCH, is_commit_id
from ..store import ZERO, GitStore


def verify_push(git_dir: Path, old: str, new: str, ref: str,
                main: str | None = None, threads: Sequence[str] = ()) -> list[str]:
    """What a pre-receive hook runs for one ref update in a (bare) server repository.
    ``main``: main's commit after this push when the same push moves it (a run ledger's
    approval links and writers are checked against it), else main's head now. ``threads``:
    the thread refs the same push creates (a new thread must not look like one of them)."""
    from ..accept.trust import Trust
    from ..history.refusals import REMOTE_PREFIX, check_update
    from ..runs.format import PREFIX as RUNS
    from ..runs.sync import verify_pushed

    zero = ZERO.decode()
    namespace = layout.remote_namespace(ref)
    problem = layout.ref_name_problem(ref)
    if problem is not None or namespace not in ("main", "runs", "journals", "threads"):
        return [f"{ref[:200]!r}: [remote.ref_name] only {BRANCH}, run ledgers ({RUNS}<id>), "
                f"refusal journals ({REMOTE_PREFIX}<16 lowercase hex digits>) and LangGraph "
                f"threads ({layout.THREADS_PREFIX}<thread>/<ns>/checkpoints) hold gitstate "
                f"state" + (f"; this name is refused: {problem}" if problem else "")]
    journal = namespace == "journals"
    if new == zero and journal:
        return [f"deleting {ref} is refused: the refusal journal is kept"]
    if new == zero and ref == BRANCH:
        return [f"deleting {ref} is refused"]
    trust = Trust.of_server(git_dir)  # who may claim a role: the server's own git config
    if trust.pusher_roles is not None and not trust.pusher_roles:
        return [f"{ref[:200]!r}: [trust.unknown_pusher] {trust.pusher} is not in the "
                "server's pushers file (git config gitstate.pushers), so may push nothing"]
    store = GitStore(git_dir)
    quarantine = os.environ.get("GIT_OBJECT_DIRECTORY")
    if quarantine:
        store.use_quarantine(quarantine)
    store.strict = True  # pushed objects: sizes from headers, trees and commits by fsck
    try:
        if journal:  # grows only: a fast-forward, or a new generation naming the old head
            return [f"{ref}: {p}" for p in check_update(store, None if old == zero else old,
                                                        new)]
        if namespace == "threads":  # the thread rule (gitstate/threads/check.py)
            from ..threads.sync import verify_pushed as verify_thread

            return verify_thread(store, ref, None if old == zero else old,
                                 None if new == zero else new, threads)
        if ref != BRANCH:
            if main is not None and not is_commit_id(main):
                return [f"[usage.main] --main {main[:60]!r} is not a commit id (40 lowercase "
                        "hex digits)"]
            return verify_pushed(store, ref, None if old == zero else old,
                                 None if new == zero else new, trust,
                                 main=None if main in (None, zero) else main)
        return [str(p) for p in foreign.check_range(store, None if old == zero else old, new,
                                                    trust=trust)]
    finally:
        store.close()
