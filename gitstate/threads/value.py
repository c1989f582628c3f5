"""What a checkpoint value from elsewhere may hold before any decoder sees it
(docs/security.md, "Threads from elsewhere"; docs/remote.md).

LangGraph's default serde decodes a ``msgpack`` value with extension types that import a
module and call a name from it (``EXT_CONSTRUCTOR_*``, ``EXT_METHOD_SINGLE_ARG``,
``EXT_PYDANTIC_*``): in its default (permissive) mode, any name, so one crafted channel
value is a call of ``os.system`` on the machine that resumes the thread. A value that
arrives from another clone is therefore walked with the very decoder the serde uses
(ormsgpack), with an extension hook that constructs nothing and only records what each
extension names; the value is taken only when every extension is one LangGraph writes for
plain data: the types of its own strict allow-list (``SAFE_MSGPACK_TYPES``: dates, UUIDs,
decimals, sets, paths, messages, Send/Command/Interrupt...), the one method it allows
(``datetime.datetime.fromisoformat``), numpy arrays and delta snapshots. Anything else,
an unknown extension code, or a value the decoder cannot read refuses the commit. Values
typed otherwise (``json``, ``bytes``, ``null``) construct no object under the default
serde; ``pickle`` is refused by check.py before this.

Where ormsgpack is not installed (a server without the ``langgraph`` extra), a
``msgpack`` value cannot be walked and is refused: never taken unchecked.
"""

from __future__ import annotations

from typing import Any

# LangGraph's SAFE_MSGPACK_TYPES (langgraph-checkpoint 4.3), kept here so that a hook
# without langgraph installed decides the same; a type added there and missing here is
# refused on arrival (safe side), never the reverse.
SAFE_TYPES: frozenset[tuple[str, str]] = frozenset(
    [("datetime", n) for n in ("datetime", "date", "time", "timedelta", "timezone")] +
    [("uuid", "UUID"), ("decimal", "Decimal"), ("builtins", "set"),
     ("builtins", "frozenset"), ("collections", "deque"), ("zoneinfo", "ZoneInfo"),
     ("re", "compile"), ("langchain_core.documents.base", "Document")] +
    [("ipaddress", f"IPv{v}{k}") for v in (4, 6) for k in ("Address", "Interface",
                                                           "Network")] +
    [(m, n) for m in ("pathlib", "pathlib._local")
     for n in ("Path", "PosixPath", "WindowsPath")] +
    [(f"langchain_core.messages.{m}", f"{c}{s}") for m, c in (
        ("base", "BaseMessage"), ("human", "HumanMessage"), ("ai", "AIMessage"),
        ("system", "SystemMessage"), ("chat", "ChatMessage"), ("tool", "ToolMessage"),
        ("function", "FunctionMessage")) for s in ("", "Chunk")] +
    [("langchain_core.messages.modifier", "RemoveMessage")] +
    [("langgraph.types", n) for n in ("Send", "TimeoutPolicy", "Interrupt", "Command",
                                      "StateSnapshot", "PregelTask", "Overwrite")] +
    [("langgraph.store.base", "Item"), ("langgraph.store.base", "GetOp")])
SAFE_METHODS = frozenset({("datetime", "datetime", "fromisoformat")})
_NAMED = (0, 1, 2, 4, 5)  # constructor and pydantic codes: (module, name, args, ...)
_METHOD = 3  # (module, name, arg, method)
_DATA = (6, 7)  # numpy array (dtype, shape, order, buffer), delta snapshot (a value)


class UnsafeValue(Exception):
    """A value that may construct an object when decoded: ``str`` says which."""


def check_msgpack(data: bytes) -> None:
    """Raise :class:`UnsafeValue` unless every extension in ``data`` is plain data."""
    try:
        import ormsgpack
    except ImportError:
        raise UnsafeValue("msgpack values cannot be checked here (ormsgpack is not "
                          "installed), so none is taken") from None

    why: list[str] = []  # the decoder reports a hook's exception as its own ValueError

    def hook(code: int, body: bytes) -> Any:
        try:
            return _ext(code, body)
        except UnsafeValue as exc:
            why.append(str(exc))
            raise

    def _ext(code: int, body: bytes) -> Any:
        inner = ormsgpack.unpackb(body, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        if code in _DATA:
            return None
        if code not in _NAMED and code != _METHOD:
            raise UnsafeValue(f"msgpack extension code {code}, which LangGraph's serde "
                              "does not write")
        if not isinstance(inner, (list, tuple)) or len(inner) < 3 or not all(
                isinstance(x, str) for x in inner[:2]):
            raise UnsafeValue(f"a msgpack extension (code {code}) that names no type")
        if code == _METHOD:
            if len(inner) < 4 or (inner[0], inner[1], inner[3]) not in SAFE_METHODS:
                raise UnsafeValue(f"a msgpack extension calling a method of "
                                  f"{str(inner[0])[:60]}.{str(inner[1])[:60]}")
        elif (inner[0], inner[1]) not in SAFE_TYPES:
            raise UnsafeValue(f"a msgpack extension constructing {inner[0][:60]}."
                              f"{inner[1][:60]}, which is not plain data")
        return None

    try:
        ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
    except Exception as exc:  # the decoder's own refusal, whatever it is
        if why:
            raise UnsafeValue(why[0]) from None
        raise UnsafeValue(f"a msgpack value the decoder cannot read "
                          f"({type(exc).__name__})") from None


def check_typed(kind: str, body: bytes) -> None:
    """:func:`check_msgpack` for a value typed ``msgpack``; other kinds pass here."""
    if kind == "msgpack":
        check_msgpack(body)
