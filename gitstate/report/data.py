"""What the auditor's report shows, gathered from one agent's repository as plain data.

The overview (every key, live or expired, the handoff, verify's checks, recent wake-ups,
commits and refused attempts), one
timeline per key (every set, clear, revert and adopt from the history projection, expiries
derived from the stored expiry times, refused attempts from the refusal journal, and wake-up
receipts with the value each received), the commits that get a page of their own (the
key-level change and the section as injected before and after), and the state at chosen
instants (what ``gitstate render --at`` prints for each wake-up, each expiry and the
report's time). html.py turns this into pages; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..core.model import State, display_value, format_time, parse_time
from ..history import receipts, refusals

if TYPE_CHECKING:
    from ..api.repo import StateRepo

COMMIT_PAGES = 200  # the newest commits get a page; older ones are in the key tables
RECENT = 20
AT_PAGES = 50  # "state at" pages: the newest wake-ups and expiries, and the report's time
KEY_EVENTS = 2000  # a key's page shows its newest changes (and receipts) up to this


def overview(repo: StateRepo, name: str, use_git: bool = False) -> dict[str, Any]:
    from ..audit.integrity import verify

    now = repo.now()
    state = repo.state()
    checks = [c.to_dict() for c in verify(repo, use_git=use_git)]
    git_dir = str(repo.state_dir / ".git")
    return {
        "agent": name, "head": repo.head(), "now": now.isoformat(),
        "live": [{"key": k, "value": display_value(e.value), "set_at": e.set_at,
                  "reason": e.reason, "actor": e.actor, "expires_at": e.expires_at,
                  "expired": e.is_expired(now)}
                 for k, e in sorted(state.keys.items())],
        "handoff": None if state.handoff is None else {
            "note": state.handoff.note, "left_at": state.handoff.left_at,
            "status": state.handoff.status},
        "checks": checks, "ok": all(c["ok"] for c in checks),
        "wakeups": list(_take(receipts.entries(git_dir), RECENT)),
        "commits": [r.to_dict() for r in repo.history(RECENT)],
        "refused": list(_take((e for e in refusals.entries(repo.store)
                               if not e.get("damaged")), RECENT)),
    }


def _take(items: Iterator[dict[str, Any]], n: int) -> Iterator[dict[str, Any]]:
    for i, item in enumerate(items):
        if i >= n:
            return
        yield item


def timelines(repo: StateRepo) -> dict[str, dict[str, Any]]:
    """key -> {"events": [...], "refused": [...], "wakeups": [...]}, oldest first."""
    now = repo.now()
    out: dict[str, dict[str, Any]] = {}

    def line(key: str) -> dict[str, Any]:
        return out.setdefault(key, {"events": [], "refused": [], "wakeups": []})

    for rec in repo.reader.full_history():  # oldest first
        keys = [str(rec["key"])] if rec.get("key") else sorted(
            str(k) for k in (rec.get("adopt") or {}).get("keys", {}))
        for key in keys:
            if rec.get("key") == key:
                op = "revert" if rec.get("reverts") else rec["op"]
                value = rec["new"] if rec["op"] != "clear" else None
            else:  # an adopted hand edit names its keys and their new values
                op, value = "adopt", (rec.get("adopt") or {}).get("keys", {}).get(key)
            line(key)["events"].append({
                "time": rec["time"], "op": op, "value": value, "reason": rec["reason"],
                "actor": rec["actor"], "commit": rec["commit"],
                "expires_at": rec.get("expires_at")})
    for tl in out.values():
        tl["events"] = _with_expiries(tl["events"], now)
    for entry in refusals.entries(repo.store):
        refused_key = entry.get("key")
        if refused_key and not entry.get("damaged") and \
                not str(refused_key).startswith("runs/"):
            line(str(refused_key))["refused"].append(entry)
    for tl in out.values():
        tl["refused"].reverse()
    _wakeups(repo, out)
    for tl in out.values():  # a page stays readable: older entries are in `gitstate log`
        tl["left_out"] = {name: max(len(tl[name]) - KEY_EVENTS, 0)
                          for name in ("events", "refused", "wakeups")}
        for name in ("events", "refused", "wakeups"):
            tl[name] = tl[name][-KEY_EVENTS:]
    return out


def _with_expiries(events: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """An expiry mark where a set's expiry passed before the next change of the key."""
    result = []
    for i, ev in enumerate(events):
        result.append(ev)
        expires = ev.get("expires_at")
        if ev["op"] == "clear" or not expires:
            continue
        ends = parse_time(events[i + 1]["time"]) if i + 1 < len(events) else now
        if parse_time(expires) <= ends:
            result.append({"time": expires, "op": "expire", "value": None,
                           "reason": "its expiry passed", "actor": None,
                           "commit": ev["commit"], "expires_at": None})
    return result


def _wakeups(repo: StateRepo, out: dict[str, dict[str, Any]]) -> None:
    """Each receipt, on every key's timeline, with the value that wake-up received."""
    states: dict[str, State] = {}
    for rec in reversed(list(receipts.entries(str(repo.state_dir / ".git")))):
        head = rec.get("head")
        if not head:
            continue
        if head not in states:
            try:
                states[head] = repo.state_at(str(head))
            except Exception:  # a receipt of a commit gone: shown as receiving nothing
                states[head] = State()
        moment = parse_time(str(rec["time"]))
        live = states[head].live(moment)
        for key, tl in out.items():
            entry = live.get(key)
            tl["wakeups"].append({"time": rec["time"], "id": rec["id"],
                                  "runtime": rec["runtime"], "head": head,
                                  "value": None if entry is None else display_value(
                                      entry.value)})


def commit_pages(repo: StateRepo, limit: int = COMMIT_PAGES) -> list[dict[str, Any]]:
    """The newest commits: the change, and the section as injected before and after (at
    the commit's own time, in the configured locale)."""
    from ..audit.views import show

    pages = []
    for rec in [r.to_dict() for r in repo.history(limit)]:
        data = show(repo, rec["commit"])
        moment = parse_time(rec["time"])
        data["section_after"] = repo.render(now=moment, commit=rec["commit"])
        data["section_before"] = repo.render(now=moment, commit=rec["parent"]) \
            if rec.get("parent") else ""
        pages.append(data)
    return pages


def instants(repo: StateRepo, lines: dict[str, dict[str, Any]],
             limit: int = AT_PAGES) -> list[dict[str, Any]]:
    """The instants that get a "state at" page, newest first: the report's time, each
    wake-up (the newest ``limit``) and each expiry. Each: time (UTC text), why, stamp (its
    file name)."""
    found: dict[str, list[str]] = {format_time(repo.now()): ["the report's time"]}
    for rec in _take(receipts.entries(str(repo.state_dir / ".git")), limit):
        runtime = str(rec["runtime"]) + ("/" + str(rec["event"]) if rec["event"] else "")
        found.setdefault(str(rec["time"]), []).append(f"a wake-up ({runtime})")
    for key, tl in sorted(lines.items()):
        for ev in tl["events"]:
            if ev["op"] == "expire":
                found.setdefault(str(ev["time"]), []).append(f"{key} expired")
    newest = sorted(found, key=parse_time, reverse=True)[:limit]
    return [{"time": t, "why": "; ".join(found[t]), "stamp": stamp(t)} for t in newest]


def stamp(time: str) -> str:
    """A file name for an instant: ``20260813T030300Z``."""
    return parse_time(time).strftime("%Y%m%dT%H%M%SZ")


def parse_stamp(text: str) -> str | None:
    """The stored time (UTC text) a :func:`stamp` names; None for anything else."""
    if len(text) != 16 or not text.isascii() or text[8] != "T" or text[15] != "Z" or \
            not (text[:8] + text[9:15]).isdigit():
        return None
    try:
        moment = datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        return format_time(parse_time(format_time(moment)))
    except ValueError:
        return None


def state_at(repo: StateRepo, instant: dict[str, Any]) -> dict[str, Any]:
    """What ``gitstate render --at`` answers for the instant: the commit that was HEAD,
    every key with whether it had expired, the handoff, and the section as rendered."""
    from ..audit.views import commit_at
    from ..core.errors import UsageError

    moment = parse_time(instant["time"])
    try:
        commit = commit_at(repo, moment)
    except UsageError:
        return {**instant, "commit": None, "keys": [], "handoff": None, "section": ""}
    state = repo.state_at(commit)
    return {**instant, "commit": commit,
            "keys": [{"key": k, "value": display_value(e.value), "set_at": e.set_at,
                      "reason": e.reason, "actor": e.actor, "expires_at": e.expires_at,
                      "expired": e.is_expired(moment)} for k, e in sorted(state.keys.items())],
            "handoff": None if state.handoff is None else {
                "note": state.handoff.note, "left_at": state.handoff.left_at,
                "status": state.handoff.status},
            "section": repo.render(now=moment, commit=commit)}
