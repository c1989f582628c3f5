"""gitstate as LangGraph's long-term memory: ``GitStateStore(agent_dir)``, a ``BaseStore``
over the agent's key table.

An item is one key of the table: namespace ``("memories", "user-1")`` and key ``food``
become ``store.memories.user-1.food`` (``item_key``), its value (a JSON object) the key's
value. Every put is ``StateRepo.set`` and every delete ``StateRepo.clear``: one audited
commit with a reason, through the one write path, so the input rules, the secret scan,
the schema, the key caps and the section limits all apply, and an item's history is the
key's git log (``history``). Reads answer from HEAD. TTLs (minutes, as LangGraph counts
them) are the key's expiry: an expired item is no longer returned, and stays in history.

Names are escaped into the key alphabet (``[a-z0-9-]`` kept; an upper-case letter is
``_`` + the letter in lower case, ``_`` is ``__``, any other character ``_`` + its UTF-8
bytes as three decimal digits each, an empty key ``_``), so no two items share a key,
namespaces that differ only in case never look alike to the key rules, and a label can
never address another namespace. A name UTF-8 cannot encode (a lone surrogate) is refused
at put (``key.encoding``), and a key the table refuses as a look-alike of another item's
(``key.confusable``) names both items. docs/langgraph.md, "Long-term memory", has the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import threading
import unicodedata
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

try:
    from langgraph.store.base import (
        NOT_PROVIDED,
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        NotProvided,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        validate_op_namespace,
    )
except ImportError as exc:  # the extra is not installed: say which one
    raise ImportError("gitstate.langgraph.store needs the langgraph extra: pip install "
                      f"'gitstate[langgraph]' ({exc})") from exc

from ..api.repo import StateRepo
from ..core.errors import InvalidInput
from ..core.model import Entry, parse_time
from ..core.records import ChangeRecord
from .match import matches, namespace_matches

PREFIX = "store"
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_REASON: contextvars.ContextVar[str | None] = contextvars.ContextVar("gitstate_store_reason",
                                                                     default=None)

Namespace = tuple[str, ...]


def escape(name: str) -> str:
    """One namespace label or key in the key alphabet (see the module docstring)."""
    if name == "":
        return "_"
    out = []
    for ch in name:
        if ch in _PLAIN:
            out.append(ch)
        elif "A" <= ch <= "Z":
            out.append("_" + ch.lower())
        elif ch == "_":
            out.append("__")
        else:
            out.append("".join(f"_{b:03d}" for b in ch.encode("utf-8", "surrogatepass")))
    return "".join(out)


def unescape(part: str) -> str | None:
    """The name ``escape`` made ``part`` from; None when no name escapes to it."""
    if part == "_":
        return ""
    raw = bytearray()
    i = 0
    while i < len(part):
        ch = part[i]
        if ch in _PLAIN:
            raw += ch.encode()
            i += 1
        elif ch != "_" or i + 1 >= len(part):
            return None
        elif part[i + 1] == "_":
            raw += b"_"
            i += 2
        elif "a" <= part[i + 1] <= "z":
            raw += part[i + 1].upper().encode()
            i += 2
        elif part[i + 1:i + 4].isdigit() and len(part[i + 1:i + 4]) == 3 and \
                int(part[i + 1:i + 4]) < 256:
            raw.append(int(part[i + 1:i + 4]))
            i += 4
        else:
            return None
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return name if escape(name) == part else None


def item_key(namespace: Namespace, key: str, prefix: str = PREFIX) -> str:
    """The key-table key of an item."""
    return ".".join([prefix, *map(escape, namespace), escape(key)])


def parse_item_key(name: str, prefix: str = PREFIX) -> tuple[Namespace, str] | None:
    """(namespace, key) of a key-table key, or None when it is not a Store item."""
    parts = name.split(".")
    if len(parts) < 3 or parts[0] != prefix:
        return None
    names = [unescape(p) for p in parts[1:]]
    if any(n is None for n in names):
        return None
    labels = tuple(str(n) for n in names)
    if any(not label or "." in label for label in labels[:-1]):
        return None
    return labels[:-1], labels[-1]


def shown(text: str) -> str:
    """A name as it reads in a commit message: quoted, with control and invisible
    characters escaped (a reason must stay one readable text)."""
    quoted = json.dumps(text, ensure_ascii=False)
    return "".join(ch if ch.isprintable() and unicodedata.category(ch) != "Cf"
                   else f"\\u{ord(ch):04x}" for ch in quoted)


def _twin(exc: InvalidInput, namespace: Namespace, key: str,
          other: tuple[Namespace, str]) -> InvalidInput:
    """The key table's refusal of a look-alike key in the Store's terms (items, rule)."""
    how = ("differs only in case from" if exc.rule == "key.case" else
           "looks like (confusable characters such as 0/O, 1/l/I, rn/m)")
    return InvalidInput(
        f"item {shown(key)} in namespace {shown('/'.join(namespace))} was refused (rule "
        f"{exc.rule}): its key {exc.details.get('key')!r} {how} the key "
        f"{exc.details.get('existing')!r} of the existing item {shown(other[1])} in "
        f"namespace {shown('/'.join(other[0]))}; the key table refuses keys a reader could "
        "take for one another: use the existing item or a clearly different key",
        rule=exc.rule, key=exc.details.get("key"), existing=exc.details.get("existing"),
        item=[*namespace, key], existing_item=[*other[0], other[1]])


class GitStateStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are keys of a gitstate agent's table (see the
    module docstring). ``agent_dir`` is made if absent. ``reason``: the commit reason of
    puts that name none (default: what was put where); ``actor`` and ``writer`` as for
    ``StateRepo``; ``ttl``: LangGraph's TTL config (refresh on read is off by default,
    since a refresh is a commit)."""

    supports_ttl = True

    def __init__(self, agent_dir: str | Path, *, prefix: str = PREFIX,
                 reason: str | None = None, actor: str | None = None,
                 writer: str = "runtime", ttl: TTLConfig | None = None) -> None:
        path = Path(agent_dir)
        if not (path / "state" / ".git").is_dir():
            StateRepo.init(path, writer=writer).close()
        self.repo = StateRepo(path, writer=writer, actor=actor)
        self.prefix = prefix
        self.default_reason = reason
        self.ttl_config = {"refresh_on_read": False, **(ttl or {})}
        self.mutex = threading.RLock()
        self._created: dict[str, str] = {}
        self._scanned: str | None = None

    def close(self) -> None:
        self.repo.close()

    def __enter__(self) -> GitStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def reason(self, text: str) -> Iterator[None]:
        """Puts and deletes inside the block (this thread or task) commit with ``text``."""
        token = _REASON.set(text)
        try:
            yield
        finally:
            _REASON.reset(token)

    # -- the key table ----------------------------------------------------------------

    def key_of(self, namespace: Namespace, key: str) -> str:
        return item_key(tuple(namespace), str(key), self.prefix)

    def _live(self) -> dict[tuple[Namespace, str], tuple[str, Entry]]:
        state = self.repo.state()
        out = {}
        for name, entry in state.live(self.repo.now()).items():
            where = parse_item_key(name, self.prefix)
            if where is not None and isinstance(entry.value, dict):
                out[where] = (name, entry)
        return out

    def _created_at(self, name: str, entry: Entry) -> datetime:
        """When the item was first set since it was last cleared, from the key's history
        (scanned once per commit, newest first, back to what was scanned before)."""
        head = self.repo.head()
        if head != self._scanned:
            fresh: list[ChangeRecord] = []
            for rec in self.repo.reader.history_iter():
                if rec["commit"] == self._scanned:
                    break
                fresh.append(rec)
            else:
                self._created = {}
            for rec in reversed(fresh):
                key = rec.get("key")
                if key is None:
                    continue
                if rec["op"] == "clear":
                    self._created.pop(key, None)
                elif rec["new"] is not None:
                    self._created.setdefault(key, rec["time"])
            self._scanned = head
        return parse_time(self._created.get(name, entry.set_at))

    def _item(self, where: tuple[Namespace, str], name: str, entry: Entry,
              cls: type[Item] = Item) -> Item:
        namespace, key = where
        return cls(namespace=namespace, key=key, value=dict(entry.value),  # type: ignore[arg-type]
                   created_at=self._created_at(name, entry),
                   updated_at=parse_time(entry.set_at))

    def entry(self, namespace: Namespace, key: str) -> Entry | None:
        """The item as the key table holds it: value, set_at, reason, actor, expiry
        (expired items too)."""
        return self.repo.state().keys.get(self.key_of(namespace, key))

    def history(self, namespace: Namespace, key: str) -> list[ChangeRecord]:
        """Every change of the item, newest first, from git: commit, time, actor, op
        (set / clear / revert ...), old, new, reason, expiry."""
        name = self.key_of(namespace, key)
        return [rec for rec in self.repo.reader.history_iter(contains=name.encode())
                if rec.get("key") == name]

    # -- BaseStore ----------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Reads answer from the state before the batch's writes, as LangGraph's own
        stores do; the last put of an item in a batch wins; each write is one commit."""
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
        with self.mutex:
            live = self._live()
            results: list[Result] = []
            puts: dict[tuple[Namespace, str], PutOp] = {}
            refresh: dict[str, Entry] = {}
            for op in ops:
                if isinstance(op, GetOp):
                    found = live.get((tuple(op.namespace), str(op.key)))
                    results.append(None if found is None else self._item(
                        (tuple(op.namespace), str(op.key)), *found))
                    if found is not None and op.refresh_ttl:
                        refresh[found[0]] = found[1]
                elif isinstance(op, SearchOp):
                    hits = self._search(op, live)
                    results.append([self._item(w, n, e, SearchItem) for w, n, e in hits])
                    if op.refresh_ttl:
                        refresh.update({n: e for _, n, e in hits})
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._namespaces(op, live))
                elif isinstance(op, PutOp):
                    puts[(tuple(op.namespace), str(op.key))] = op
                    results.append(None)
                else:
                    raise ValueError(f"unknown store operation {type(op).__name__}")
            for op in puts.values():
                self._write(op)
            for name, entry in refresh.items():
                if entry.expires_at is not None and name not in {
                        self.key_of(*where) for where in puts}:
                    self._refresh(name, entry)
            return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _search(self, op: SearchOp, live: dict[tuple[Namespace, str], tuple[str, Entry]]
                ) -> list[tuple[tuple[Namespace, str], str, Entry]]:
        """Items under the prefix that pass the filter, most recently updated first (then
        by key); ``query`` ranks nothing: this store has no vector index."""
        prefix = tuple(op.namespace_prefix)
        hits = [(where, name, entry) for where, (name, entry) in live.items()
                if where[0][:len(prefix)] == prefix and matches(entry.value, op.filter)]  # type: ignore[arg-type]
        hits.sort(key=lambda h: h[1])
        hits.sort(key=lambda h: h[2].set_at, reverse=True)
        return hits[op.offset:op.offset + op.limit]

    @staticmethod
    def _namespaces(op: ListNamespacesOp,
                    live: dict[tuple[Namespace, str], tuple[str, Entry]]) -> list[Namespace]:
        found = {where[0] for where in live}
        found = {ns for ns in found
                 if all(namespace_matches(c, ns) for c in op.match_conditions or ())}
        if op.max_depth is not None:
            found = {ns[:op.max_depth] for ns in found}
        return sorted(found)[op.offset:op.offset + op.limit]

    def _reason_for(self, what: str, namespace: Namespace, key: str) -> str:
        given = _REASON.get() or self.default_reason
        if given:
            return given
        where = "/".join(shown(label)[1:-1] for label in namespace)
        return f"LangGraph store: {what} {shown(key)} in {where}"

    def _write(self, op: PutOp) -> None:
        namespace, key = tuple(op.namespace), str(op.key)
        name = self.key_of(namespace, key)
        try:
            self._set_or_clear(op, namespace, key, name)
        except InvalidInput as exc:
            other = parse_item_key(str(exc.details.get("existing")), self.prefix)
            if exc.rule not in ("key.confusable", "key.case") or other is None:
                raise
            raise _twin(exc, namespace, key, other) from None

    def _set_or_clear(self, op: PutOp, namespace: Namespace, key: str, name: str) -> None:
        if op.value is None:
            if name not in self.repo.state().keys:
                return  # deleting what is not there: nothing to record
            try:
                self.repo.clear(name, self._reason_for("delete", namespace, key))
            except InvalidInput as exc:
                if exc.rule != "clear.absent":  # another writer deleted it first
                    raise
            return
        if any("\ud800" <= ch <= "\udfff" for label in (*namespace, key) for ch in label):
            raise InvalidInput(  # it escapes into a key, which never decodes back
                f"the item {shown(key)} in namespace {shown('/'.join(namespace))} has a name "
                "holding a lone surrogate, which UTF-8 cannot encode: it could be written but "
                "never read back; nothing was written", rule="key.encoding")
        ttl = op.ttl if not isinstance(op.ttl, NotProvided) else None
        self.repo.set(name, dict(op.value), self._reason_for("put", namespace, key),
                      ttl_hours=None if ttl is None else ttl / 60)

    def _refresh(self, name: str, entry: Entry) -> None:
        """A read that refreshes a TTL: the same value again, for the same duration."""
        assert entry.expires_at is not None
        hours = (parse_time(entry.expires_at) - parse_time(entry.set_at)).total_seconds() / 3600
        if hours > 0:
            self.repo.set(name, entry.value, f"LangGraph store: refresh the TTL of {name} "
                          "on read", ttl_hours=hours, expected=entry.value)

    # -- puts with a reason -------------------------------------------------------------

    def put(self, namespace: Namespace, key: str, value: Any,
            index: Any = None, *, ttl: float | NotProvided | None = NOT_PROVIDED,
            reason: str | None = None) -> None:
        """``BaseStore.put``, and ``reason``: the commit's reason for this put."""
        with self.reason(reason) if reason else contextlib.nullcontext():
            super().put(namespace, key, value, index, ttl=ttl)

    async def aput(self, namespace: Namespace, key: str, value: Any,
                   index: Any = None, *, ttl: float | NotProvided | None = NOT_PROVIDED,
                   reason: str | None = None) -> None:
        with self.reason(reason) if reason else contextlib.nullcontext():
            await super().aput(namespace, key, value, index, ttl=ttl)

    def delete(self, namespace: Namespace, key: str, *, reason: str | None = None) -> None:
        with self.reason(reason) if reason else contextlib.nullcontext():
            super().delete(namespace, key)

    async def adelete(self, namespace: Namespace, key: str, *,
                      reason: str | None = None) -> None:
        with self.reason(reason) if reason else contextlib.nullcontext():
            await super().adelete(namespace, key)

    def sweep(self, reason: str = "LangGraph store: clear expired items") -> int:
        """Clear the expired items (each stays in history); returns how many. Expired
        items count toward ``max_stored_keys`` until cleared."""
        with self.mutex:
            state, now = self.repo.state(), self.repo.now()
            live = state.live(now)
            gone = [name for name in sorted(state.keys) if name not in live
                    and parse_item_key(name, self.prefix) is not None]
            for name in gone:
                self.repo.clear(name, reason)
            return len(gone)
