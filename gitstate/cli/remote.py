"""Commands beyond one machine: remote, clone, push, pull, status, verify-push, fleet.
The sync module (and the repository) load when a command runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..core import textsafe
from ..core.errors import Refused
from .context import EXITS, Ctx, emit, examples, json_option, shown


@examples("gitstate remote set git://server/agents/trader.git", "gitstate remote show")
@click.group()
def remote() -> None:
    """The state repository's remote (any git server: path, git://, http(s)://, ssh://)."""


@examples(
    "gitstate remote set git://server/agents/trader.git",
    "gitstate remote set ../mirror/trader.git",
)
@remote.command("set")
@click.argument("url")
@json_option
@click.pass_obj
def remote_set(obj: Ctx, url: str, as_json: bool) -> None:
    """Use URL as the remote (origin)."""
    with obj.repo() as repo:
        repo.store.set_remote_url(url)
    emit({"remote_url": url}, as_json, f"remote set to {url}")


@examples(
    "gitstate remote show",
    exits="Exit: 0 a remote is set; 1 none is set; 2 an uninitialised directory; 3 the "
          "repository cannot be used.",
)
@remote.command("show")
@json_option
@click.pass_obj
def remote_show(obj: Ctx, as_json: bool) -> None:
    """Print the remote URL (exit 1 when none is set)."""
    with obj.repo() as repo:
        url = repo.store.remote_url()
    if not url:
        raise Refused("no remote is set", rule="remote.none")
    emit({"remote_url": url}, as_json, url)


@examples("gitstate remote unset")
@remote.command("unset")
@json_option
@click.pass_obj
def remote_unset(obj: Ctx, as_json: bool) -> None:
    """Forget the remote (local history is untouched)."""
    with obj.repo() as repo:
        repo.store.set_remote_url(None)
    emit({"remote_url": None}, as_json, "remote unset")


def _sync_text(r: dict[str, Any]) -> str:
    lines = [f"{r['action']}: main at {r['head'][:12]}"
             + (f", pushed {r['pushed']}" if r["pushed"] else "")
             + (f", pulled {r['pulled']}" if r["pulled"] else "")
             + (f", re-applied {r['rebased']}" if r["rebased"] else "")]
    for c in r["refused"]:
        lines.append(f"refused {c['commit'][:12]} ({c['reason']}): [{c['rule']}] {c['message']}")
        for key in c["local"]:
            mine, theirs = c["local"][key], c["remote"][key]
            lines.append(f"  {key}: local intent {mine['value'] if mine else '(cleared)'}; remote "
                         f"{theirs['value'] if theirs else '(absent)'}"
                         + (f" ({theirs['reason']})" if theirs else ""))
    if r["kept_on"]:
        lines.append(f"the local commits are kept on {r['kept_on']}")
    runs = r.get("runs") or {}
    for word in ("pushed", "pulled", "ahead", "diverged"):
        if runs.get(word):
            lines.append(f"runs {word}: {', '.join(runs[word])}")
    for name, why in (runs.get("refused") or {}).items():
        lines.append(f"run {name} not pushed: {why}")
    threads = r.get("threads") or {}
    for word in ("pushed", "pulled", "ahead", "diverged"):
        if threads.get(word):
            lines.append(f"threads {word}: {', '.join(threads[word])}")
    for name, why in (threads.get("refused") or {}).items():
        lines.append(f"thread {name} not pushed: {why}")
    if threads.get("pending"):
        lines.append("threads with pending writes not yet in a commit (not pushed): "
                     + ", ".join(threads["pending"]))
    return "\n".join(lines)


def _threads_option(f: Any) -> Any:
    """--threads (every LangGraph thread) and --thread ID (one; repeatable)."""
    f = click.option("--thread", "thread_ids", multiple=True, metavar="ID",
                     help="Carry this LangGraph thread too (repeatable).")(f)
    return click.option("--threads", "all_threads", is_flag=True,
                        help="Carry every LangGraph thread too (docs/langgraph.md).")(f)


def _commit_pending(repo: Any, threads: list[str] | bool) -> None:
    """Pending writes still in a thread's journal (an interrupted super-step) go into a
    commit first, by the saver's own commit_pending_writes, so that the thread resumes
    elsewhere; without LangGraph installed, push reports them as pending."""
    from ..threads import sync as lgsync

    waiting = [t for t in lgsync.asked(repo.store, threads) if lgsync.pending(repo.store, t)]
    if not waiting:
        return
    try:
        from ..langgraph.saver import GitCheckpointSaver
    except ImportError:
        return
    with GitCheckpointSaver(repo.agent_dir) as saver:
        for thread_id in waiting:
            saver.commit_pending_writes(thread_id)


def _asked(all_threads: bool, thread_ids: tuple[str, ...]) -> list[str] | bool:
    return True if all_threads else list(thread_ids)


def _against_remote(data: dict[str, Any]) -> str:
    """Ahead and behind, said only when there is a remote to be ahead of."""
    if not data["remote_url"]:
        return "no remote (`gitstate remote set URL` adds one)"
    ahead = "diverged" if data["ahead"] is None else f"{data['ahead']} ahead"
    return f"remote {data['remote_url']}: {ahead}, {data['behind']} behind"


@examples("gitstate push", "gitstate push --json", "gitstate push --thread refund-O-104")
@click.command()
@_threads_option
@json_option
@click.pass_obj
def push(obj: Ctx, as_json: bool, all_threads: bool, thread_ids: tuple[str, ...]) -> None:
    """Publish local changes (push with lease; re-applied on top if the remote moved).

    Exit 1 when a local change no longer applies; it is shown with the remote's value and
    kept on refs/gitstate/unpushed/<time>.
    """
    with obj.repo() as repo:
        result = repo.remote.push()
        threads = _asked(all_threads, thread_ids)
        if threads:
            _commit_pending(repo, threads)
            result.threads = repo.remote.push_threads(threads)
    emit(result, as_json, _sync_text)
    if result.refused:
        raise Refused(f"{len(result.refused)} local change(s) no longer apply",
                      rule="remote.conflict")


@examples("gitstate pull", "gitstate pull --json", "gitstate pull --threads")
@click.command()
@_threads_option
@json_option
@click.pass_obj
def pull(obj: Ctx, as_json: bool, all_threads: bool, thread_ids: tuple[str, ...]) -> None:
    """Fast-forward to the remote (never a merge; divergence is reported). LangGraph
    threads come when asked, each checked before it is taken."""
    with obj.repo() as repo:
        result = repo.remote.pull()
        threads = _asked(all_threads, thread_ids)
        if threads:
            result.threads = repo.remote.pull_threads(threads)
    emit(result, as_json, _sync_text)


@examples("gitstate status", "gitstate status --json")
@click.command()
@json_option
@click.pass_obj
def status(obj: Ctx, as_json: bool) -> None:
    """Local main against the commit last seen on the remote (queued changes, no network)."""
    with obj.repo() as repo:
        status = repo.remote.status()

    def text(data: dict[str, Any]) -> str:
        out = f"main {data['head'][:12]}; " + _against_remote(data) + f"; sync {data['sync']}"
        if data["unpushed_refs"]:
            out += "\nunresolved: " + ", ".join(data["unpushed_refs"])
        return out

    emit(status, as_json, text)


@examples("gitstate clone git://server/agents/trader.git /srv/agents/trader-2")
@click.command()
@click.argument("url")
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@_threads_option
@json_option
@click.pass_obj
def clone(obj: Ctx, url: str, directory: Path | None, as_json: bool, all_threads: bool,
          thread_ids: tuple[str, ...]) -> None:
    """A new agent directory (DIRECTORY, else --agent-dir) from a remote state repository
    (and its LangGraph threads, when asked)."""
    from ..api.repo import StateRepo

    target = directory or obj.agent_dir
    with StateRepo.clone(url, target) as repo:
        data: dict[str, Any] = {"url": url, "state_dir": str(repo.state_dir),
                                "head": repo.head()}
        threads = _asked(all_threads, thread_ids)
        if threads:
            data["threads"] = repo.remote.pull_threads(threads)["pulled"]

    def text(d: dict[str, Any]) -> str:
        out = f"cloned {d['url']} into {d['state_dir']} (main at {d['head'][:12]})"
        return out + (f"\nthreads: {', '.join(d['threads']) or '(none)'}"
                      if "threads" in d else "")

    emit(data, as_json, text)


@examples(
    "gitstate verify-push \"$old\" \"$new\" refs/heads/main --git-dir /srv/git/trader.git",
    "gitstate verify-push --main \"$main_new\" \"$old\" \"$new\" refs/heads/runs/r1 "
    "--git-dir /srv/git/trader.git",
    exits="Exit: 0 the update may land; 1 it is refused (each problem on stderr, "
          "verify_push.failed); 2 a usage error; 3 the repository cannot be used.",
)
@click.command("verify-push")
@click.argument("old")
@click.argument("new")
@click.argument("ref")
@click.option("--git-dir", type=click.Path(file_okay=False, path_type=Path), default=".",
              help="The (bare) repository receiving the push (default: current directory).")
@click.option("--main", "main", metavar="COMMIT", default=None,
              help="main as it will be after this push, for a run ledger's checks (its "
                   "approval links and the schema's writers); default: the server's main "
                   "now. The hook passes the pushed main's new commit, which it checks in "
                   "the same run: one refused ref refuses the whole push.")
@click.option("--new-thread", "new_threads", metavar="REF", multiple=True,
              help="A thread ref the same push creates (repeatable; the hook passes each): "
                   "a new thread must not look like one of them either.")
@json_option
def verify_push(old: str, new: str, ref: str, git_dir: Path, main: str | None,
                new_threads: tuple[str, ...], as_json: bool) -> None:
    """Server-side check of one pushed ref update (what hooks/git/pre-receive runs).

    Checks every new commit exactly like a local write (docs/security.md): history (no
    rewrite, no merge, time never before the parent), the tree (only the known files, regular
    and bounded), the trailers and every input rule, replay to the committed state, and every
    cap, limit and the schema. Each refusal names its rule. A run ledger is checked
    against --main when the same push moves main (the hook passes it).
    """
    from ..remote.server import verify_push as check

    problems = check(git_dir, old, new, ref, main=main, threads=new_threads)
    if as_json:
        emit({"ref": ref, "old": old, "new": new, "ok": not problems, "problems": problems},
             True, "")
    for problem in problems:
        click.echo(f"gitstate: {textsafe.visible(problem)}", err=True)
    if problems:
        raise Refused(f"push refused: {len(problems)} problem(s)", rule="verify_push.failed")


@examples(exits=EXITS)
@click.command()
@click.argument("root", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--expiring-hours", type=float, default=4.0, show_default=True,
              help="List live keys that expire within this many hours.")
@click.option("--verify", "full", is_flag=True, help="Run every `gitstate verify` check in "
              "each agent (reads all its objects and history; slower) instead of the quick "
              "ones.")
@json_option
def fleet(root: Path, expiring_hours: float, full: bool, as_json: bool) -> None:
    """One row per agent directory under ROOT: keys, last change, expiring keys, checks,
    ahead/behind the remote (or "no remote").

    The checks are verify's quick ones (packing, git config, stray files, working tree, a
    rewritten tip), whose cost does not grow with an agent's history; --verify runs them
    all. The walk under ROOT enters no .git directory and no agent's state/.

    \b
    gitstate fleet ~/agents --expiring-hours 2
    gitstate fleet ~/agents --verify --json

    Exit 1 (fleet.empty) when ROOT holds no agent directory.
    """
    from ..audit.fleet import fleet as do_fleet

    def progress(items: list[Path]) -> Any:
        if len(items) < 10 or not sys.stderr.isatty():
            return items
        return click.progressbar(items, label="agents", file=sys.stderr)

    def wrapped(items: list[Path]) -> Any:
        bar = progress(items)
        if bar is items:
            yield from items
            return
        with bar as it:
            yield from it

    rows = do_fleet(root, expiring_hours, progress=wrapped, full=full)
    if not rows:
        raise Refused(f"no agent directory under {root} (an agent directory holds "
                      "state/.git): give the directory that holds the agents' directories",
                      rule="fleet.empty")
    if as_json:
        emit({"agents": rows}, True, "")
        return
    for raw, r in zip(rows, shown(rows), strict=True):
        if "error" in r:
            click.echo(f"{r['agent']}: {r['error']}")
            continue
        last = r["last_change"]
        when = Ctx(root / raw["agent"]).when(raw["last_change"]["time"])  # its agent's zone
        click.echo(f"{r['agent']}: {r['live_keys']} live keys; last {when} "
                   f"{last['actor']}: {last['reason'][:60]}; expiring: "
                   f"{', '.join(r['expiring']) or '-'}; {r['checks']} checks {r['verify']}; "
                   + _against_remote({**r, "remote_url": r["remote"]}))
