"""Approvals on the command line: list them, and decide them as a human (the agent, over
MCP, can only see them)."""

from __future__ import annotations

import click

from .context import EXITS, Ctx, emit, examples, finish, json_option


@examples(exits=EXITS)
@click.command()
@click.option("--all", "show_all", is_flag=True,
              help="Also decided, consumed and expired approvals (default: pending ones).")
@json_option
@click.pass_obj
def approvals(obj: Ctx, show_all: bool, as_json: bool) -> None:
    """Approvals of frozen tool calls, newest first (schema.yaml's `approvals` names the
    tools that need one).

    \b
    gitstate approvals
    gitstate approve 209406bd0bee --reason "ticket T-1 checked"
    gitstate deny 209406bd0bee --reason "amount too high"
    """
    with obj.repo() as repo:
        items = repo.approvals.list()
    if not show_all:
        items = [a for a in items if a["status"] == "pending" and not a["expired"]]
    lines = [f"{a['id']}  {a['status']:<9} {a['tool']}({_args(a['args'])})  requested by "
             f"{a['requested_by']} at {obj.when(a['set_at'])}"
             + (f"; expires {obj.when(a['expires_at'])}" if a["expires_at"] else "")
             + (f"; spent by {a['consumed_by']}" if a.get("consumed_by") else "")
             + (f"; the call failed: {a.get('error')}" if a.get("outcome") == "failed" else "")
             + (" (expired)" if a["expired"] else "") for a in items]
    emit({"approvals": items}, as_json, "\n".join(lines) or "(no pending approvals)")


def _args(args: object) -> str:
    from ..core.model import display_value
    from ..core.textsafe import visible

    return visible(display_value(args) if isinstance(args, dict | list) else str(args))


def _decide(approve: bool) -> click.Command:
    verb = "approve" if approve else "deny"

    @click.command(verb)
    @click.argument("approval_id")
    @click.option("--reason", "-r", required=True, help="Why: becomes the commit message.")
    @click.option("--request-id", help="Idempotency key (see `gitstate set --help`).")
    @json_option
    @click.pass_obj
    def decide(obj: Ctx, approval_id: str, reason: str, request_id: str | None,
               as_json: bool) -> None:
        with obj.repo() as repo:
            method = repo.approve if approve else repo.deny
            finish(obj, method(approval_id, reason, request_id=request_id), as_json)

    decide.help = (f"{verb.capitalize()} the pending approval APPROVAL_ID (one commit; only "
                   "a writer its schema policy names, human by default).")
    why = "ticket T-1 checked" if approve else "amount too high"
    return examples(f'gitstate {verb} 209406bd0bee --reason "{why}"', "gitstate approvals")(
        decide)


approve = _decide(True)
deny = _decide(False)


class CallFailed(Exception):
    """The spent call's command exited non-zero (its outcome is recorded on the way out)."""

    def __init__(self, command: str, status: int) -> None:
        super().__init__(f"{command} exited {status}")
        self.status = status


@examples(
    exits="Exit: COMMAND's own status once it ran; before it: 1 refused (approval.not_runnable, "
          "approval.offline, ...), 2 a usage error, 3 the repository cannot be used.",
)
@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("approval_id")
@click.option("--tool", required=True, help="The tool the approval froze.")
@click.option("--args-json", required=True, metavar="JSON",
              help="The call's arguments (a JSON object): exactly the approved ones.")
@click.option("--run", "run_id", help="The run the call belongs to: a failure is recorded "
              "in its ledger (checked to accept it before the spend).")
@click.option("--tool-call-id", help="The call's id in the run (default spend-APPROVAL_ID).")
@click.option("--reason", "-r", help="The consume commit's message.")
@click.option("--as", "writer", type=click.Choice(["human", "runtime"]), default="human",
              show_default=True, help="Spend as the runtime (a gateway in shell; a run's "
              "tool results are the runtime's).")
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
def spend(obj: Ctx, approval_id: str, tool: str, args_json: str, run_id: str | None,
          tool_call_id: str | None, reason: str | None, writer: str, as_json: bool,
          command: tuple[str, ...]) -> None:
    """Spend APPROVAL_ID, then run COMMAND with the approved call: the one way a shell
    gateway runs a tool that needs an approval.

    The command starts only after the consume commit is written (the compare-and-swap; with
    a remote, whatever the sync mode, the push). A second spend, by this or any other
    process or clone, is refused before its command starts (approval.not_runnable, naming
    the winner's commit); a remote that cannot be reached refuses it (approval.offline)
    unless the policy says `offline_spend: true`. COMMAND gets the call in its environment:
    GITSTATE_APPROVAL_ID, GITSTATE_TOOL, GITSTATE_ARGS_JSON (canonical JSON) and
    GITSTATE_SPEND_COMMIT. If it exits non-zero, the failure is recorded (the run's ledger
    with --run, else the approval's outcome on main), the approval stays consumed, and
    gitstate exits with the command's status.

    \b
    gitstate spend 209406bd0bee --tool refund \\
        --args-json '{"ticket": "T-1", "amount": 120}' -- ./pay.sh
    gitstate spend 209406bd0bee --as runtime --run refund-T-1 --tool refund \\
        --args-json '{"ticket": "T-1", "amount": 120}' -- ./pay.sh
    """
    import os
    import shutil
    import subprocess

    from ..core.errors import UsageError
    from .context import parse_json_value

    args = parse_json_value(args_json, "--args-json")
    if shutil.which(command[0]) is None:  # checked before the spend: nothing to hand over
        raise UsageError(f"{command[0]}: no such command", rule="usage.command")
    from ..api.repo import StateRepo

    status, note = 0, ""
    with StateRepo(obj.agent_dir, writer=writer) as repo:
        try:
            with repo.approvals.spend(approval_id, tool, args, run_id=run_id,
                                     tool_call_id=tool_call_id, reason=reason) as call:
                env = {**os.environ, "GITSTATE_APPROVAL_ID": call.approval_id,
                       "GITSTATE_TOOL": call.tool, "GITSTATE_ARGS_JSON": call.args_json,
                       "GITSTATE_SPEND_COMMIT": call.commit}
                status = subprocess.run(list(command), env=env, check=False).returncode
                if status:
                    raise CallFailed(command[0], status)
        except CallFailed as failed:
            note = "; ".join(getattr(failed, "__notes__", [])) or "the failure is recorded"
    emit({"approval_id": call.approval_id, "tool": call.tool, "commit": call.commit,
          "status": status, "note": note or None}, as_json,
         f"spent approval {call.approval_id} in {call.commit[:12]}; {command[0]} exited "
         f"{status}" + (f" ({note})" if note else ""))
    if status:
        raise click.exceptions.Exit(status)
