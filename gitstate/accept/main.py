"""Commits gitstate did not make here: the one check they pass before any of them is used.

A commit that arrives by pull, clone, a remote-first write, the re-application of a push, or
a server's pre-receive hook — or one made with plain git — is checked exactly like a local
write (docs/security.md): the commit is not a merge and is dated no earlier than its parent
and not in the future; its tree holds only the known names (``layout.TREE_FILES``) as
regular blobs within their bounds; its message has a reason and gitstate trailers that pass
the input rules (key, value, reason, actor, TTL cap, handoff rules, confusable keys); and
replaying the trailers reproduces the committed working_state.json, which then keeps every
whole-state limit (live-key and stored-key caps, the section's size).

:func:`check_range` returns the problems, each with the rule that refused it; an empty list
means the commits may land. Nothing here writes.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..approvals import steps as approvals
from ..core import rules
from ..core.errors import GitStateError, InvalidInput
from ..core.layout import FILE_MODE, REQUIRED, SCHEMA_FILE, STATE_FILE, TREE_FILES
from ..core.model import EMPTY, State
from ..core.schema import Schema
from ..core.trailers import Change, NotAGitstateCommit, parse_message
from ..history.replay import ReplayError, apply_change
from ..system.config import Config
from ..write import checks
from .rederive import committed_state, rederive, same_message, schema_at, trailer_time
from .trust import Trust, claim_problem

if TYPE_CHECKING:
    from ..store import GitStore

TTL_SLACK_SECONDS = 60


@dataclass(frozen=True)
class Problem:
    """Why one commit may not land."""

    commit: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.commit[:12]}: [{self.rule}] {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"commit": self.commit, "rule": self.rule, "message": self.message}


class _Refusal(Exception):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule, self.message = rule, message


def check_range(store: GitStore, old: str | None, new: str, config: Config | None = None,
                now: float | None = None, *, own: bool = False,
                trust: Trust | None = None) -> list[Problem]:
    """Problems with the commits after ``old`` (None: from the root) up to ``new``.
    ``own``: this clone's own commits, re-made by push on the remote's main, whose role
    claims are this machine's and need no proof (gitstate/accept/trust.py). ``trust``: who may
    claim a role, when not ``config``'s (the server's hook)."""
    config = config or Config()
    now = time.time() if now is None else now
    if old == new:
        return []
    chain, refused = linear_chain(store, old, new)
    if refused is not None:
        return [refused]
    try:
        state = committed_state(store, old) if old else EMPTY
        previous_time = store.commit_times(old)[1] if old else None
    except GitStateError as exc:
        return [Problem(old or new, exc.rule, exc.message)]
    problems: list[Problem] = []
    parent = old
    trust = trust or Trust.of(config)
    schemas: dict[str, Schema | None] = {}
    for commit in chain:
        try:
            state, previous_time = _check_commit(store, commit, parent, state, previous_time,
                                                 config, now)
            if not own:
                _check_claim(store, commit, parent, trust, schemas)
            parent = commit
        except _Refusal as exc:
            problems.append(Problem(commit, exc.rule, exc.message))
            break  # later commits build on a state that is not trusted
        except GitStateError as exc:
            problems.append(Problem(commit, exc.rule, exc.message))
            break
    return problems


def linear_chain(store: GitStore, old: str | None,
                 new: str) -> tuple[list[str], Problem | None]:
    """The commits after ``old`` (None: from the root) up to ``new``, oldest first, or the
    problem that refuses them all: a merge (every gitstate history, in every ref
    namespace, is one line) or a ``new`` that does not descend from ``old`` (a rewrite)."""
    chain: list[str] = []
    current: str | None = new
    try:
        while current is not None and current != old:
            chain.append(current)
            parents = store.parents(current)
            if len(parents) > 1:
                return [], Problem(current, "commit.merge", "a merge commit: gitstate "
                                   "histories are linear, and a second parent would hide its "
                                   "commits from the first-parent audit trail")
            current = parents[0] if parents else None
    except GitStateError as exc:
        return [], Problem(current or new, exc.rule, exc.message)
    if current != old:
        return [], Problem(new, "history.not_descendant",
                           f"{new[:12]} does not descend from {(old or '')[:12]}: "
                           "non-fast-forward updates (rewritten history) are refused")
    chain.reverse()
    return chain, None


def _check_commit(store: GitStore, commit: str, parent: str | None, before: State,
                  previous_time: int | None, config: Config,
                  now: float) -> tuple[State, int]:
    author_time, commit_time = store.commit_times(commit)
    clock = rules.time_problem(author_time, commit_time, previous_time, now)
    if clock is not None:  # the clock rule every namespace shares
        raise _Refusal(*clock)
    ids = _check_tree(store, commit)
    info = store.commit_info(commit)
    try:
        info.message.decode("utf-8")
        change = parse_message(info.message)
    except UnicodeDecodeError as exc:
        raise _Refusal("commit.encoding", "the commit message is not UTF-8") from exc
    except NotAGitstateCommit as exc:
        raise _Refusal("commit.no_trailers", f"no gitstate trailers (made outside gitstate: "
                       f"{exc})") from exc
    if change.op == "init" and previous_time is not None:
        raise _Refusal("commit.init_not_root", "an init commit after the first one would wipe "
                       "every key at once; only a history's root may be an init")
    try:
        _check_change(change, before, commit_time, config)
        wanted = rederive(store, commit, parent, before, commit_time, change, ids, config)
        same_message(wanted, info.message)
        after = apply_change(before, change, commit_time)
    except InvalidInput as exc:
        raise _Refusal(exc.rule, exc.message) from exc
    except (ReplayError, KeyError, TypeError, ValueError) as exc:
        raise _Refusal("replay.invalid", f"the trailers do not replay ({exc})") from exc
    data = after.to_bytes()
    if len(data) > TREE_FILES[STATE_FILE]:
        raise _Refusal("tree.too_large", f"{STATE_FILE} would be {len(data)} bytes; the limit "
                       f"is {TREE_FILES[STATE_FILE]}")
    if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() != ids[STATE_FILE]:
        raise _Refusal("replay.mismatch", f"{STATE_FILE} differs from what the trailers say "
                       "(the state was changed without an audited operation)")
    schema = schema_at(store, commit) if SCHEMA_FILE in ids else None
    checks.whole_state(before, after, datetime.fromtimestamp(commit_time, UTC), config,
                       schema, writer=None)
    return after, commit_time


def _check_tree(store: GitStore, commit: str) -> dict[str, str]:
    ids: dict[str, str] = {}
    for raw_name, mode, sha in store.tree_entries(commit):
        name = raw_name.decode("utf-8", "replace")
        if name not in TREE_FILES:
            raise _Refusal("tree.unknown_name", f"the tree holds {name!r}, which is not a "
                           f"gitstate file (only {', '.join(sorted(TREE_FILES))})")
        if mode != FILE_MODE:
            raise _Refusal("tree.mode", f"{name} has mode {mode:o}: only regular files "
                           f"({FILE_MODE:o}) are accepted, never symlinks, trees or submodules")
        # working_state.json is never read: its id must equal that of the replayed bytes
        # (checked below), which bounds it; only the other files are measured
        size = 0 if name == STATE_FILE else store.object_size(sha)
        if size > TREE_FILES[name]:
            raise _Refusal("tree.too_large", f"{name} is {size} bytes; the limit is "
                           f"{TREE_FILES[name]}")
        ids[name] = sha
    for name in REQUIRED:
        if name not in ids:
            raise _Refusal("tree.missing", f"the tree has no {name}")
    return ids


def _touches_approvals(change: Change) -> bool:
    keys = (change.adopt or {}).get("keys") if isinstance(change.adopt, dict) else None
    return isinstance(keys, dict) and any(approvals.is_approval_key(str(k)) for k in keys)


def _check_change(change: Change, before: State, commit_time: int, config: Config) -> None:
    """The input rules a local write applies, on what the trailers say."""
    rules.check_reason(change.reason)
    if change.reason != change.reason.strip():
        raise InvalidInput("the reason has leading or trailing blank space",
                           rule="reason.not_trimmed")
    rules.check_actor(change.actor)
    if change.clock is not None:
        trailer_time(change.clock, "Gitstate-Clock")
    op = change.op
    step = dict(change.extra).get(approvals.TRAILER)
    if op in ("set", "clear"):
        key = rules.check_key(change.key)
        if op == "clear" and key not in before.keys:
            raise InvalidInput(f"clear of {key!r}, which is not set", rule="clear.absent")
        if op == "set":
            rules.check_value(change.new)
            _check_expiry(change.expires_at, commit_time)
        if approvals.is_approval_key(key):  # only a planner's step, never a plain set or clear
            expired = before.keys[key].is_expired(datetime.fromtimestamp(commit_time, UTC)) \
                if op == "clear" and step is None else False  # clearing an expired record
            if (op == "clear" and not expired) or (op == "set" and step is None):
                raise InvalidInput(f"{op} of the approval record {key} without a "
                                   f"{approvals.TRAILER} step", rule="approval.reserved")
        elif step is not None:
            raise InvalidInput(f"a {approvals.TRAILER} step on {key}, which is not an "
                               "approval record", rule="approval.invalid")
    elif op == "handoff" and change.handoff is not None:
        _check_handoff(change.handoff, config)
    elif op in ("adopt", "observe") and _touches_approvals(change):
        raise InvalidInput(f"an {op} that changes approval records", rule="approval.reserved")
    elif op in ("adopt", "observe"):
        _check_adopt(change.adopt, before, commit_time, config)


def _check_claim(store: GitStore, commit: str, parent: str | None, trust: Trust,
                 schemas: dict[str, Schema | None]) -> None:
    """A commit that only some roles may make claims one of them, and counts only when its
    signer (or pusher) may act as it (gitstate/accept/trust.py): an approval's decision (the roles
    its policy names), a schema change (the runtime's or a human's: the agent never changes
    the schema), and any change of a key whose writers leave out the agent — by a set, a
    clear, a revert, an adopted hand edit or an observation alike."""
    change = parse_message(store.commit_info(commit).message)
    if parent is None:
        return
    schema = _parent_schema(store, parent, schemas)
    claims: list[tuple[str, ...]] = []
    step = dict(change.extra).get(approvals.TRAILER)
    if change.op == "schema":
        claims.append(("runtime", "human"))
    elif step in ("approve", "deny"):
        tool = change.new.get("tool") if isinstance(change.new, dict) else None
        policy = (schema.approvals if schema else {}).get(str(tool))
        claims.append(policy.writers if policy else ("human",))
    else:
        keys = [change.key] if change.op in ("set", "clear") and change.key else \
            [str(k) for k in ((change.adopt or {}).get("keys") or {})] \
            if change.op in ("adopt", "observe") else []
        for key in keys:
            spec = schema.spec(key) if schema and not approvals.is_approval_key(key) else None
            if spec is not None and "agent" not in spec.writers:
                claims.append(tuple(spec.writers))
    for roles in dict.fromkeys(claims):  # each distinct claim once
        problem = claim_problem(store, commit, roles, trust)
        if problem is not None:
            raise _Refusal(*problem)


def _parent_schema(store: GitStore, parent: str,
                   schemas: dict[str, Schema | None]) -> Schema | None:
    """The schema in force at ``parent``, parsed once per schema.yaml blob."""
    blob = store.file_ids(parent).get(SCHEMA_FILE)
    if blob is None:
        return None
    if blob not in schemas:
        schemas[blob] = schema_at(store, parent)
    return schemas[blob]


def _check_adopt(adopt: dict[str, Any] | None, before: State, commit_time: int,
                 config: Config) -> None:
    data = adopt or {}
    keys = data.get("keys", {})
    if not isinstance(keys, dict):
        raise InvalidInput("Gitstate-Adopt keys must be an object", rule="trailer.adopt")
    for key, spec in keys.items():
        rules.check_key(key)
        if spec is None:
            continue
        if not isinstance(spec, dict) or "value" not in spec:
            raise InvalidInput(f"Gitstate-Adopt entry for {key!r} has no value",
                               rule="trailer.adopt")
        rules.check_value(spec["value"])
        _check_expiry(spec.get("expires_at"), commit_time)
    handoff = data.get("handoff")
    if handoff:
        if not isinstance(handoff, dict):
            raise InvalidInput("Gitstate-Adopt handoff must be an object", rule="trailer.adopt")
        _check_handoff(handoff, config)


def _check_handoff(fields: dict[str, Any], config: Config) -> None:
    note = fields.get("note")
    checked = rules.check_handoff(
        note, fields.get("status"), fields.get("next_steps"), fields.get("evidence"),
        fields.get("blocker"), plain_max_chars=config.handoff_plain_max_chars,
        max_bytes=config.handoff_max_bytes)
    if checked.status is None and checked.note != note:
        raise InvalidInput("a plain handoff note must be stored collapsed to one line and cut "
                           f"at {config.handoff_plain_max_chars} characters, as gitstate "
                           "stores it", rule="handoff.not_normalized")


def _check_expiry(expires: object, commit_time: int) -> None:
    if expires is None:
        return
    moment = trailer_time(expires, "Gitstate-Expires").timestamp()
    if moment < commit_time:
        raise InvalidInput("the expiry is before the commit", rule="ttl.range")
    if moment - commit_time > rules.TTL_MAX_HOURS * 3600 + TTL_SLACK_SECONDS:
        raise InvalidInput(f"the expiry is more than {rules.TTL_MAX_HOURS} hours (366 days) "
                           "after the commit", rule="ttl.range")


def summary(problems: list[Problem], limit: int = 5) -> str:
    return "; ".join(str(p) for p in problems[:limit])
