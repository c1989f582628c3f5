"""What the facade's reads compute: the state view of ``get``, the wake-up section of
``render``, the schema report and the tools a phase allows, each from the reader and the
engine's clock of one opening (``StateRepo`` hands them its parts)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from ..core.errors import UsageError
from ..core.model import format_time
from ..core.records import HistoryEntry
from ..core.render import fit, phase_lines, render, section_key_bytes
from ..core.results import KeyState, SchemaReport, StateView
from ..system.config import LOCALES, resolve_tz

if TYPE_CHECKING:
    from ..core.schema import Schema
    from ..history.reader import StateReader
    from ..system.config import Config
    from ..write.engine import WriteEngine


def state_view(reader: StateReader, engine: WriteEngine, config: Config,
               now: datetime | None, history: int, commit: str | None) -> StateView:
    """``get``: keys (expired marked), handoff, recent history, HEAD, counts and caps, the
    phase and its tools; with ``commit``, as of that commit."""
    with engine.mutex:
        mark, head = reader.snapshot()
        head = commit or head
        state = reader.state_at(head)
        moment = now or engine.now()
        recent, rewritten = reader.recent(head, history, mark) if commit is None \
            else (reader.history_from(commit, history), [])
        live = state.live(moment)
        schema = reader.schema_at(head)
        return StateView(
            head=head, now=format_time(moment),
            keys={k: KeyState.of(e, k not in live) for k, e in sorted(state.keys.items())},
            handoff=state.handoff, history=[HistoryEntry.of(r) for r in recent],
            live_keys=len(live), max_keys=config.max_keys,
            section_bytes=section_key_bytes(state, moment),
            section_max_bytes=config.section_max_bytes,
            schema_version=schema.version if schema else None,
            phase=schema.phase(state, live) if schema else None,
            allowed_tools=schema.allowed_tools(state, moment) if schema else None,
            warnings=reader.worktree_warnings() + rewritten if commit is None else [])


def section(reader: StateReader, engine: WriteEngine, config: Config, now: datetime | None,
            locale: str | None, commit: str | None, max_chars: int | None,
            set_tool: str | None, get_tool: str | None) -> str:
    """``render``: the section for a wake-up at ``now`` (see ``StateRepo.render``)."""
    if not config.enabled:
        return ""
    locale = locale or config.locale
    if locale not in LOCALES:
        raise UsageError(f"locale must be one of {', '.join(LOCALES)}", rule="usage.locale")
    commit = commit or reader.head()
    state, moment = reader.state_at(commit), now or engine.now()
    schema = reader.schema_at(commit)
    extra = phase_lines(schema.compiled() if schema else None, state, moment, locale)
    tz = resolve_tz(config.timezone)
    tools = set_tool or config.set_tool, get_tool or config.get_tool
    if max_chars is not None:
        return fit(state, moment, locale, tz, extra, max_chars, *tools)[0]
    return render(state, moment, locale, tz, extra, tools[0])


def schema_report(reader: StateReader, engine: WriteEngine,
                  candidate: Schema | None) -> SchemaReport:
    """Violations of HEAD's schema (or of ``candidate``): live ones and expired ones."""
    head = reader.head()
    schema = candidate or reader.schema_at(head)
    if schema is None:
        return SchemaReport(None, [], [])
    state = reader.state_at(head)
    live = set(state.live(engine.now()))
    everything = schema.violations(state, set())
    live_problems = schema.violations(state, live or {"\0"})
    return SchemaReport(schema.version, live_problems,
                        [p for p in everything if p not in live_problems])


def allowed_tools(reader: StateReader, engine: WriteEngine,
                  commit: str | None) -> list[str] | None:
    """The tools the phase at ``commit`` (default HEAD) allows; None without phases."""
    commit = commit or reader.head()
    schema = reader.schema_at(commit)
    return schema.allowed_tools(reader.state_at(commit), engine.now()) if schema else None
