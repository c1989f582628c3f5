"""A run's compact ``<state>`` block for a wake-up. Pure.

``render_run(run, next_action, locale, tz)``: the goal, the criteria met and unmet, the
current step, the next pending steps, open questions, the approval waited for, the budget
left, the stop reason and the next action, in zh-TW, en or ja. Every untrusted text is
flattened by :func:`textsafe.inline` and its angle brackets replaced, so no goal, step or
question can end the block early or open a tag of its own.

The block has its own byte cap (:data:`MAX_BYTES`) and is never cut: the ledger refuses an
event after which the block, in any locale, would pass it (``run.block_too_large``), so a
wake-up receives either the whole block or, for a run that could not grow, the last one
that fitted.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any

from ..core.model import parse_time
from ..core.textsafe import inline

MAX_BYTES = 4096
NEXT_STEPS = 3  # the block names the next few pending steps, and counts the rest
LOCALES = ("zh-TW", "en", "ja")

_WORDS = {
    "en": {"goal": "Goal", "risk": "risk", "status": "status", "met": "Criteria met",
           "unmet": "Criteria unmet", "current": "Current step", "next": "Next steps",
           "more": "and {n} more", "questions": "Open questions",
           "approval": "Waiting for approval", "budget": "Budget left",
           "stop": "Stop reason", "action": "Next action", "none": "none",
           "iterations": "iterations", "tokens": "tokens", "cost": "cents",
           "deadline": "deadline", "of": "of", "rule": "Only the runtime changes this run; "
           "propose events with run_propose."},
    "zh-TW": {"goal": "目標", "risk": "風險", "status": "狀態", "met": "已達成條件",
              "unmet": "未達成條件", "current": "目前步驟", "next": "後續步驟",
              "more": "另有 {n} 項", "questions": "待答問題", "approval": "等待核准",
              "budget": "剩餘預算", "stop": "停止原因", "action": "下一動作", "none": "無",
              "iterations": "回合", "tokens": "tokens", "cost": "分", "deadline": "期限",
              "of": "/", "rule": "此執行只由執行環境變更；請以 run_propose 提出事件。"},
    "ja": {"goal": "目標", "risk": "リスク", "status": "状態", "met": "達成済みの条件",
           "unmet": "未達成の条件", "current": "現在の手順", "next": "次の手順",
           "more": "ほか {n} 件", "questions": "未解決の質問", "approval": "承認待ち",
           "budget": "残り予算", "stop": "停止理由", "action": "次の動作", "none": "なし",
           "iterations": "反復", "tokens": "tokens", "cost": "セント", "deadline": "期限",
           "of": "/", "rule": "この実行はランタイムだけが変更します。run_propose で"
           "イベントを提案してください。"},
}


def _safe(text: object) -> str:
    return inline(str(text)).replace("<", "‹").replace(">", "›")


def _list(items: list[str], none: str) -> str:
    return "; ".join(_safe(i) for i in items) if items else none


def _budget(b: dict[str, Any], w: dict[str, str], tz: tzinfo) -> str:
    parts = []
    for used, cap, word in (("iteration_count", "max_iterations", "iterations"),
                            ("token_estimate", "max_tokens", "tokens"),
                            ("cost_cents", "max_cost_cents", "cost")):
        if b.get(cap) is not None:
            parts.append(f"{w[word]} {max(b[cap] - b[used], 0)} {w['of']} {b[cap]}")
    if b.get("deadline_at"):
        moment = parse_time(b["deadline_at"]).astimezone(tz).strftime("%m-%d %H:%M")
        parts.append(f"{w['deadline']} {moment}")
    return "; ".join(parts) if parts else w["none"]


def render_run(run: dict[str, Any], next_action: dict[str, Any], locale: str,
               tz: tzinfo) -> str:
    """The block, ending in a newline."""
    w = _WORDS[locale]
    goal, state = run["goal"], run["state"]
    met = [c for c in goal["success_criteria"] if c in state["criteria_evidence"]]
    unmet = [c for c in goal["success_criteria"] if c not in state["criteria_evidence"]]
    pending = state["pending_steps"]
    upcoming = _list(pending[:NEXT_STEPS], w["none"])
    if len(pending) > NEXT_STEPS:
        upcoming += " " + w["more"].format(n=len(pending) - NEXT_STEPS)
    lines = [
        f'<state run="{_safe(goal["run_id"])}" version="{int(state["version"])}">',
        f"{w['goal']}: {_safe(goal['description'])} ({w['risk']} {_safe(goal['risk_class'])}; "
        f"{w['status']} {_safe(goal['status'])})",
        f"{w['met']}: {_list(met, w['none'])}",
        f"{w['unmet']}: {_list(unmet, w['none'])}",
        f"{w['current']}: {_safe(state['current_step'] or w['none'])}",
        f"{w['next']}: {upcoming}",
        f"{w['questions']}: {_list(state['open_questions'], w['none'])}",
        f"{w['approval']}: {_safe(state['awaiting_approval'] or w['none'])}",
        f"{w['budget']}: {_budget(state['budget_state'], w, tz)}",
        f"{w['stop']}: {_safe(state['stop_reason'] or w['none'])}",
        f"{w['action']}: {_safe(next_action['action'])} ({_safe(next_action['reason'])})",
        w["rule"],
        "</state>",
    ]
    return "\n".join(lines) + "\n"


def largest(run: dict[str, Any], next_action: dict[str, Any], tz: tzinfo) -> int:
    """The block's size in bytes in its longest locale (what the cap is checked against)."""
    return max(len(render_run(run, next_action, loc, tz).encode()) for loc in LOCALES)


def check_size(run: dict[str, Any], now: datetime) -> None:
    """The cap every run commit keeps (``run.block_too_large``): checked by the ledger before
    it writes an event and by the replay of a run from elsewhere (gitstate/runs/check.py)."""
    from . import model as runs
    from .validate import RunRefused

    size = largest(run, runs.next_action(run, now), UTC)
    if size > MAX_BYTES:
        raise RunRefused(f"after this event the run's <state> block would be {size} "
                              f"bytes, over its cap of {MAX_BYTES} (it is never cut): "
                              "shorten the texts, or answer open questions first",
                              rule="run.block_too_large")
