"""Approvals on the command line: list them, and decide them as a human (the agent, over
MCP, can only see them)."""

from __future__ import annotations

import click

from .context import Ctx, emit, finish, json_option


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
        items = repo.approvals()
    if not show_all:
        items = [a for a in items if a["status"] == "pending" and not a["expired"]]
    lines = [f"{a['id']}  {a['status']:<9} {a['tool']}({_args(a['args'])})  requested by "
             f"{a['requested_by']} at {a['set_at']}"
             + (f"; expires {a['expires_at']}" if a["expires_at"] else "")
             + (" (expired)" if a["expired"] else "") for a in items]
    emit({"approvals": items}, as_json, "\n".join(lines) or "(no pending approvals)")


def _args(args: object) -> str:
    from ..model import display_value
    from ..textsafe import visible

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
            finish(method(approval_id, reason, request_id=request_id), as_json)

    decide.help = (f"{verb.capitalize()} the pending approval APPROVAL_ID (one commit; only "
                   "a writer its schema policy names, human by default).")
    return decide


approve = _decide(True)
deny = _decide(False)
