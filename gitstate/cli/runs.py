"""`gitstate run ...`: run ledgers on the command line (the CLI is a human; `--as runtime`
makes it the runtime, for a gateway written in shell)."""

from __future__ import annotations

from typing import Any

import click

from ..core.errors import UsageError
from .context import (
    EXITS,
    Ctx,
    emit,
    examples,
    json_option,
    jsonl_option,
    limit_options,
    limited,
    listing,
    parse_json_value,
    parse_value,
    time_help,
)


@examples(exits=EXITS)
@click.group()
def run() -> None:
    """Runs: a goal and its working state, one commit per event on refs/heads/runs/RUN_ID.

    \b
    gitstate run start refund-O-104 --goal "refund order O-104" \\
        --criterion "refund issued" --risk high --reason "customer asked"
    gitstate run event refund-O-104 '{"type": "question_opened", "question": "amount?"}' \\
        --reason "unclear"
    gitstate run show refund-O-104
    """


def _text(view: Any) -> str:
    goal, state, nxt = view["goal"], view["state"], view["next"]
    lines = [f"run {view['run_id']} ({goal['status']}, risk {goal['risk_class']}) at "
             f"{view['head'][:12]}", f"goal: {goal['description']}"]
    lines += [f"  criterion: {c}" for c in goal["success_criteria"]]
    if state["current_step"]:
        lines.append(f"current step: {state['current_step']}")
    if state["pending_steps"]:
        lines.append("pending: " + ", ".join(state["pending_steps"]))
    lines += [f"open question: {q}" for q in state["open_questions"]]
    if state["stop_reason"]:
        lines.append(f"stop reason: {state['stop_reason']}")
    lines.append(f"next: {nxt['action']} ({nxt['reason']})")
    return "\n".join(lines)


@examples(
    "gitstate run start refund-O-104 --goal \"refund order O-104\" --criterion \"refund "
    "issued\" --reason \"customer asked\" --deadline 2026-08-14T18:00",
)
@run.command()
@click.argument("run_id")
@click.option("--goal", "description", required=True, help="What the run must achieve.")
@click.option("--criterion", "criteria", multiple=True, required=True,
              help="An observable success criterion (repeat for each).")
@click.option("--constraint", "constraints", multiple=True, help="A constraint (repeatable).")
@click.option("--risk", type=click.Choice(["low", "medium", "high", "critical"]),
              default="low", show_default=True)
@click.option("--owner", help="Who owns the goal (default: the actor).")
@click.option("--max-iterations", type=int)
@click.option("--max-tokens", type=int)
@click.option("--max-cost-cents", type=int)
@click.option("--deadline", help=time_help("ISO 8601 time after which the run stops."))
@click.option("--reason", "-r", required=True, help="Why: becomes the commit message.")
@click.option("--request-id", help="Idempotency key.")
@json_option
@click.pass_obj
def start(obj: Ctx, run_id: str, description: str, criteria: tuple[str, ...],
          constraints: tuple[str, ...], risk: str, owner: str | None,
          max_iterations: int | None, max_tokens: int | None, max_cost_cents: int | None,
          deadline: str | None, reason: str, request_id: str | None, as_json: bool) -> None:
    """Create run RUN_ID with its goal (goal_created: the ref's first commit)."""
    from ..core.model import format_time

    moment = obj.time(deadline, "--deadline")
    budget = {k: v for k, v in (("max_iterations", max_iterations), ("max_tokens", max_tokens),
                                ("max_cost_cents", max_cost_cents),
                                ("deadline_at", moment and format_time(moment)))
              if v is not None}
    with obj.repo() as repo:
        view = repo.runs.start(run_id, description=description, criteria=list(criteria),
                               constraints=list(constraints), risk=risk, owner=owner,
                               budget=budget, reason=reason, request_id=request_id)
    emit(view.to_dict(), as_json, _text)


@examples(
    "gitstate run event refund-O-104 '{\"type\": \"question_opened\", \"question\": "
    "\"amount?\"}' --reason unclear",
)
@run.command()
@click.argument("run_id")
@click.argument("event_json")
@click.option("--reason", "-r", required=True, help="Why: becomes the commit message.")
@click.option("--as", "writer", type=click.Choice(["human", "runtime"]), default="human",
              show_default=True, help="Record as the runtime (a gateway in shell).")
@click.option("--request-id", help="Idempotency key: a retry returns the first result.")
@json_option
@click.pass_obj
def event(obj: Ctx, run_id: str, event_json: str, reason: str, writer: str,
          request_id: str | None, as_json: bool) -> None:
    """Apply one event (EVENT_JSON: {"type": ..., fields}) to run RUN_ID: one commit."""
    data = parse_json_value(event_json, "EVENT_JSON")
    if not isinstance(data, dict):
        raise UsageError('EVENT_JSON is an object {"type": ..., fields}', rule="usage.json")
    with obj.repo() as repo:
        view = repo.runs.event(run_id, data, reason, writer=writer, request_id=request_id)
    emit(view.to_dict(), as_json, _text)


@examples("gitstate run cancel refund-O-104 --reason \"customer withdrew\"")
@run.command()
@click.argument("run_id")
@click.option("--reason", "-r", required=True)
@json_option
@click.pass_obj
def cancel(obj: Ctx, run_id: str, reason: str, as_json: bool) -> None:
    """Cancel run RUN_ID: it accepts no further step."""
    with obj.repo() as repo:
        view = repo.runs.event(run_id, {"type": "cancelled", "reason": reason}, reason)
    emit(view.to_dict(), as_json, _text)


@examples(
    "gitstate run show refund-O-104",
    "gitstate run show refund-O-104 --at 2026-08-13T11:03 --json",
)
@run.command()
@click.argument("run_id")
@click.option("--at", "at", metavar="REV|TIME", help=time_help(
    "As it stood at a commit of the run (a hex prefix) or at an ISO 8601 time (the last "
    "event at or before it)."))
@json_option
@click.pass_obj
def show(obj: Ctx, run_id: str, at: str | None, as_json: bool) -> None:
    """The run's goal, state and next action (JSON: goal, state, next, head)."""
    if at is not None and not (4 <= len(at) <= 40 and all(c in "0123456789abcdef" for c in at)):
        import contextlib

        from ..core.localtime import parse_given_time
        from ..core.model import format_time

        # in the agent's zone; what is no time is the ledger's to refuse (run.invalid)
        with contextlib.suppress(UsageError):
            at = obj.when(format_time(parse_given_time(at, obj.zone, "--at", "usage.at")))
    with obj.repo() as repo:
        view = repo.runs.read_at(run_id, at) if at else repo.runs.read(run_id)
    emit(view.to_dict(), as_json, _text)


@examples(
    "gitstate run promote refund-O-104 --key refund.O-104 --value 120 --evidence ledger:T-1 "
    "--reason \"refund confirmed\"",
    "gitstate run promote refund-O-104 --key refund.O-104 --value refunded --evidence "
    "refund:R-9 --reason done --as runtime",
)
@run.command()
@click.argument("run_id")
@click.option("--key", required=True, help="The key of the durable table to set.")
@click.option("--value", "raw", required=True, help="The value (parsed as for `set`: JSON "
              "scalars, else text).")
@click.option("--evidence", required=True, help="An evidence ref recorded in the run.")
@click.option("--reason", "-r", required=True, help="Why: becomes the commit message.")
@click.option("--as", "writer", type=click.Choice(["human", "runtime"]), default="human",
              show_default=True, help="Promote as the runtime (`runs: promotable` names the "
              "writers; a gateway in shell).")
@click.option("--request-id", help="Idempotency key.")
@json_option
@click.pass_obj
def promote(obj: Ctx, run_id: str, key: str, raw: str, evidence: str, reason: str,
            writer: str, request_id: str | None, as_json: bool) -> None:
    """Make a run's finding durable: one set on main that cites the run's commit.

    Only for keys schema.yaml lists under `runs: promotable`, by the writers named there;
    never automatic (docs/runs.md).
    """
    with obj.repo(writer) as repo:
        result = repo.runs.promote(run_id, key, parse_value(raw), reason, evidence=evidence,
                              request_id=request_id)
    emit(result, as_json, lambda d: f"{d['key']} promoted from run {run_id} at "
         f"{d['commit'][:12]}")


@examples("gitstate run stats", "gitstate run stats --json")
@run.command()
@json_option
@click.pass_obj
def stats(obj: Ctx, as_json: bool) -> None:
    """Metrics across every run, from history: events by type, refusals by rule, replays,
    resumes, stale results refused, lost approvals (must be 0), stop reasons."""
    with obj.repo() as repo:
        data = repo.runs.stats()

    def text(d: dict[str, Any]) -> str:
        lines = [f"runs: {d['runs']} (replay ok {d['replay_ok']}, failed "
                 f"{len(d['replay_failed'])})", f"events: {d['events']}",
                 f"resumes: {d['resumes']}", f"stale results refused: "
                 f"{d['stale_results_refused']}", f"lost approvals: {d['lost_approvals']}",
                 f"approvals waiting: {d['approvals_waiting']}"]
        for title, field in (("events by type", "events_by_type"),
                             ("refused by rule", "refused_by_rule"),
                             ("stop reasons", "stop_reasons")):
            lines.append(f"{title}: " + (", ".join(f"{k} {v}" for k, v in
                                                   sorted(d[field].items())) or "none"))
        lines += [f"damaged refusal record {p}" for p in d["refusals_damaged"]]
        return "\n".join(lines)

    emit(data, as_json, text)


@examples("gitstate run next refund-O-104")
@run.command("next")
@click.argument("run_id")
@json_option
@click.pass_obj
def next_(obj: Ctx, run_id: str, as_json: bool) -> None:
    """What the runtime does next: continue, ask_approval, escalate or stop, and why."""
    with obj.repo() as repo:
        nxt = repo.runs.read(run_id).next
    emit(nxt, as_json, lambda d: f"{d['action']}: {d['reason']}")


@examples("gitstate run list", "gitstate run list --all --json")
@run.command("list")
@limit_options
@json_option
@jsonl_option
@click.pass_obj
def list_(obj: Ctx, limit: int | None, show_all: bool, as_json: bool, as_jsonl: bool) -> None:
    """Every run with its status and stop reason (the first 50 by id unless --limit N or
    --all)."""
    with obj.repo() as repo:
        items, more = limited(repo.runs.listing(), limit, show_all)
    listing("runs", items, more, as_json, as_jsonl, lambda r: (
        f"{r['run_id']}  {r.get('status', 'damaged')}  {r.get('stop_reason') or ''}"),
        "runs", "(no runs)")


@examples(
    "gitstate run verify refund-O-104",
    exits="Exit: 0 the ledger replays exactly; 1 it does not (run.replay), or no such run; 2 a "
          "usage error or an uninitialised directory; 3 the repository cannot be used.",
)
@run.command()
@click.argument("run_id")
@json_option
@click.pass_obj
def verify(obj: Ctx, run_id: str, as_json: bool) -> None:
    """Replay RUN_ID from its first commit; exit 1 unless every run.json matches."""
    from ..core.errors import Refused

    with obj.repo() as repo:
        problems = repo.runs.verify(run_id)
    emit({"run_id": run_id, "ok": not problems, "problems": problems}, as_json,
         "ok: the ledger replays exactly" if not problems else "\n".join(problems))
    if problems:
        raise Refused(f"run {run_id} does not replay: {problems[0]}", rule="run.replay")
