"""``GitStateStore``, LangGraph's long-term memory over the key table.

LangGraph publishes no store-conformance suite; its store tests live beside each store
(libs/checkpoint/tests/test_store.py for the in-memory store, libs/checkpoint-sqlite/tests/
test_store.py and test_async_store.py for SQLite). The tests of those files that are not
about vector search or a store's own internals (SQL, migrations) are ported here, run
against GitStateStore, each under its original name with a ``lg_`` prefix, with their
assertions as published (the SQL-injection ones keep their value half: a malicious value
matches nothing). Then what is gitstate's own: audited commits with reasons, the history of
an item, TTLs, the key rules and caps, and a ``create_react_agent`` run with the Store and
the checkpointer that leaves a ``git log`` an auditor can read.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph.store.base")

from langchain_core.tools import tool
from langgraph.prebuilt import InjectedStore, create_react_agent
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from gitstate.core.errors import GitStateError, InvalidInput, KeyCapReached
from gitstate.langgraph import GitCheckpointSaver, GitStateStore
from gitstate.langgraph.store import escape, item_key, parse_item_key, unescape
from tests.helpers import GIT, assert_fsck_clean, git

ROOT = Path(__file__).resolve().parents[2]
ROOMY = ('[gitstate]\nmax_keys = 256\nmax_stored_keys = 512\nsection_max_bytes = 65536\n'
         'injection_max_chars = 1000000\n')


def roomy(path: Path) -> Path:
    """An agent directory whose key caps leave room for the ported tests' items."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.toml").write_text(ROOMY, encoding="utf-8")
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[GitStateStore]:
    with GitStateStore(roomy(tmp_path / "agent")) as s:
        yield s
    if GIT is not None:
        assert_fsck_clean(tmp_path / "agent" / "state")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- names -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["", "a", "Foo", "foo", "user_1", "a%b", "star*", "q?m",
                                  "alice\n", "这是中文", "-lead", "x.y", "_", "__", "A_b"])
def test_names_escape_into_the_key_alphabet_and_back(name: str) -> None:
    part = escape(name)
    assert unescape(part) == name
    assert all(c.islower() or c.isdigit() or c in "_-" for c in part)
    key = item_key(("ns", "sub"), name)
    assert parse_item_key(key) == (("ns", "sub"), name)


def test_keys_that_are_not_store_items_are_not_read_as_items() -> None:
    for name in ["stop_loss", "store.only", "store._9.k", "store.a..k", "other.a.k",
                 "store.A.k", "store.a._999.k"]:
        assert parse_item_key(name) is None, name


# -- ported: libs/checkpoint-sqlite/tests/test_store.py ----------------------------------

def test_lg_batch_order(store: GitStateStore) -> None:
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})
    results = store.batch([
        GetOp(namespace=("test", "foo"), key="key1"),
        PutOp(namespace=("test", "bar"), key="key2", value={"data": "value2"}),
        SearchOp(namespace_prefix=("test",), filter={"data": "value1"}, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        GetOp(namespace=("test",), key="key3"),
    ])
    assert len(results) == 5
    assert isinstance(results[0], Item)
    assert results[0].value == {"data": "value1"}
    assert results[0].key == "key1"
    assert results[0].namespace == ("test", "foo")
    assert results[1] is None
    assert isinstance(results[2], list)
    assert len(results[2]) == 1
    assert results[2][0].key == "key1"
    assert results[2][0].value == {"data": "value1"}
    assert isinstance(results[3], list)
    assert ("test", "foo") in results[3]
    assert ("test", "bar") in results[3]
    assert results[4] is None

    reordered = store.batch([
        SearchOp(namespace_prefix=("test",), filter=None, limit=5, offset=0),
        GetOp(namespace=("test", "bar"), key="key2"),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
        PutOp(namespace=("test",), key="key3", value={"data": "value3"}),
        GetOp(namespace=("test", "foo"), key="key1"),
    ])
    assert len(reordered) == 5
    assert isinstance(reordered[0], list)
    assert len(reordered[0]) >= 2
    assert isinstance(reordered[1], Item)
    assert reordered[1].value == {"data": "value2"}
    assert reordered[1].namespace == ("test", "bar")
    assert isinstance(reordered[2], list)
    assert len(reordered[2]) > 0
    assert reordered[3] is None
    assert isinstance(reordered[4], Item)
    assert reordered[4].value == {"data": "value1"}
    item3 = store.get(("test",), "key3")
    assert item3 is not None
    assert item3.value == {"data": "value3"}


def test_lg_batch_get_ops(store: GitStateStore) -> None:
    store.put(("test",), "key1", {"data": "value1"})
    store.put(("test",), "key2", {"data": "value2"})
    results = store.batch([GetOp(namespace=("test",), key="key1"),
                           GetOp(namespace=("test",), key="key2"),
                           GetOp(namespace=("test",), key="key3")])
    assert [r.key if isinstance(r, Item) else r for r in results] == ["key1", "key2", None]


def test_lg_batch_put_ops(store: GitStateStore) -> None:
    results = store.batch([
        PutOp(namespace=("test",), key="key1", value={"data": "value1"}),
        PutOp(namespace=("test",), key="key2", value={"data": "value2"}),
        PutOp(namespace=("test",), key="key3", value=None),
    ])
    assert results == [None, None, None]
    item1, item2 = store.get(("test",), "key1"), store.get(("test",), "key2")
    assert item1 and item1.value == {"data": "value1"}
    assert item2 and item2.value == {"data": "value2"}
    assert store.get(("test",), "key3") is None


def test_lg_batch_search_ops(store: GitStateStore) -> None:
    for namespace, key, value in [(("test", "foo"), "key1", {"data": "value1", "tag": "a"}),
                                  (("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
                                  (("test", "baz"), "key3", {"data": "value3", "tag": "b"})]:
        store.put(namespace, key, value)
    results = store.batch([
        SearchOp(namespace_prefix=("test",), filter={"tag": "a"}, limit=10, offset=0),
        SearchOp(namespace_prefix=("test",), filter=None, limit=2, offset=0),
        SearchOp(namespace_prefix=("test", "foo"), filter=None, limit=10, offset=0),
    ])
    assert isinstance(results[0], list) and isinstance(results[1], list)
    assert isinstance(results[2], list)
    assert len(results[0]) == 2
    assert all(item.value["tag"] == "a" for item in results[0])
    assert len(results[1]) == 2
    assert [item.namespace for item in results[2]] == [("test", "foo")]


def test_lg_batch_list_namespaces_ops(store: GitStateStore) -> None:
    data = [(("test", "documents", "public"), "doc1", {"content": "public doc"}),
            (("test", "documents", "private"), "doc2", {"content": "private doc"}),
            (("test", "images", "public"), "img1", {"content": "public image"}),
            (("prod", "documents", "public"), "doc3", {"content": "prod doc"})]
    for namespace, key, value in data:
        store.put(namespace, key, value)
    results = store.batch([
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=2, limit=10, offset=0),
        ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("public",)),),
                         max_depth=None, limit=10, offset=0),
    ])
    assert isinstance(results[0], list) and isinstance(results[1], list)
    assert isinstance(results[2], list)
    assert len(results[0]) == len(data)
    assert all(len(ns) <= 2 for ns in results[1])
    assert all(ns[-1] == "public" for ns in results[2])


def test_lg_basic_store_ops(store: GitStateStore) -> None:
    namespace, item_id = ("test", "documents"), "doc1"
    store.put(namespace, item_id, {"title": "Test Document", "content": "Hello, World!"})
    item = store.get(namespace, item_id)
    assert item and item.namespace == namespace and item.key == item_id
    assert item.value == {"title": "Test Document", "content": "Hello, World!"}
    time.sleep(0.01)
    updated = {"title": "Updated Document", "content": "Hello, Updated!"}
    store.put(namespace, item_id, updated)
    updated_item = store.get(namespace, item_id)
    assert updated_item is not None and updated_item.value == updated
    assert updated_item.updated_at >= item.updated_at
    assert updated_item.created_at == item.created_at
    assert store.get(("test", "other_documents"), item_id) is None
    store.delete(namespace, item_id)
    assert store.get(namespace, item_id) is None


def test_lg_list_namespaces(store: GitStateStore) -> None:
    names = [("test", "documents", "public"), ("test", "documents", "private"),
             ("test", "images", "public"), ("test", "images", "private"),
             ("prod", "documents", "public"), ("prod", "documents", "private")]
    for namespace in names:
        store.put(namespace, "dummy", {"content": "dummy"})
    assert len(store.list_namespaces()) == len(names)
    found = store.list_namespaces(prefix=("test",))
    assert len(found) == 4 and all(ns[0] == "test" for ns in found)
    public = store.list_namespaces(suffix=("public",))
    assert len(public) == 3 and all(ns[-1] == "public" for ns in public)
    assert all(len(ns) <= 2 for ns in store.list_namespaces(max_depth=2))
    assert len(store.list_namespaces(limit=3)) == 3
    for namespace in names:
        store.delete(namespace, "dummy")
    assert store.list_namespaces() == []


def test_lg_search(store: GitStateStore) -> None:
    data = [(("test", "docs"), "doc1",
             {"title": "First Doc", "author": "Alice", "tags": ["important"]}),
            (("test", "docs"), "doc2",
             {"title": "Second Doc", "author": "Bob", "tags": ["draft"]}),
            (("test", "images"), "img1",
             {"title": "Image 1", "author": "Alice", "tags": ["final"]})]
    for namespace, key, value in data:
        store.put(namespace, key, value)
    assert len(store.search(("test",))) == 3
    docs = store.search(("test", "docs"))
    assert len(docs) == 2 and all(item.namespace == ("test", "docs") for item in docs)
    alice = store.search(("test",), filter={"author": "Alice"})
    assert len(alice) == 2 and all(item.value["author"] == "Alice" for item in alice)
    assert len(store.search(("test",), limit=2)) == 2
    assert len(store.search(("test",), offset=2)) == 1


def test_lg_basic_store_operations(store: GitStateStore) -> None:
    uid = uuid.uuid4().hex
    namespace = (uid, "test", "documents")
    assert store.search((uid,)) == []
    store.put(namespace, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = store.get(namespace, "doc1")
    assert item is not None and item.created_at is not None and item.updated_at is not None
    store.put(namespace, "doc1", {"title": "Updated Test Document",
                                  "content": "Hello, LangGraph!"})
    updated = store.get(namespace, "doc1")
    assert updated is not None and updated.updated_at >= item.updated_at
    assert store.get((uid, "test", "other_documents"), "doc1") is None
    store.put(namespace, "doc2", {"title": "Another Document", "content": "Greetings!"})
    items = store.search((uid, "test"), limit=10)
    assert {i.key for i in items} == {"doc1", "doc2"}
    assert (uid, "test", "documents") in store.list_namespaces(prefix=(uid, "test"))
    store.delete(namespace, "doc1")
    store.delete(namespace, "doc2")
    assert store.get(namespace, "doc1") is None and store.get(namespace, "doc2") is None
    assert store.search((uid, "test"), limit=10) == []


def test_lg_list_namespaces_operations(store: GitStateStore) -> None:
    p = str(uuid.uuid4())
    names = [(p, "test", "documents", "public", p), (p, "test", "documents", "private", p),
             (p, "test", "images", "public", p), (p, "test", "images", "private", p),
             (p, "prod", "documents", "public", p),
             (p, "prod", "documents", "some", "nesting", "public", p),
             (p, "prod", "documents", "private", p)]
    for namespace in names:
        store.put(namespace, "dummy", {"content": "dummy"})
    assert len(store.list_namespaces(prefix=(p, "test"))) == 4
    found = store.list_namespaces(prefix=(p, "test", "documents"))
    assert len(found) == 2 and all(ns[1:3] == ("test", "documents") for ns in found)
    assert len(store.list_namespaces(suffix=("public", p))) == 4
    both = store.list_namespaces(prefix=(p, "test"), suffix=("public", p))
    assert len(both) == 2
    assert len(store.list_namespaces(prefix=(p, "*", "documents"))) == 5
    assert len(store.list_namespaces(suffix=("*", "public", p))) == 4
    assert store.list_namespaces(suffix=("some", "*", "public", p)) == [names[5]]
    assert all(len(ns) <= 3 for ns in store.list_namespaces(max_depth=3))
    deep = store.list_namespaces(max_depth=4, prefix=(p, "*", "documents"))
    assert len(set(deep)) == len(deep) == 5
    assert len(store.list_namespaces(prefix=(p,), limit=3)) == 3
    assert len(store.list_namespaces(prefix=(p,), offset=3)) == len(names) - 3
    assert set(store.list_namespaces(prefix=(p,))) == set(names)


def test_lg_search_items(store: GitStateStore) -> None:
    base = "test_search_items"
    names = [(base, "documents", "user1"), (base, "documents", "user2"),
             (base, "reports", "department1"), (base, "reports", "department2")]
    values = [{"title": "Doc 1", "author": "John Doe", "tags": ["important"]},
              {"title": "Doc 2", "author": "Jane Smith", "tags": ["draft"]},
              {"title": "Report A", "author": "John Doe", "tags": ["final"]},
              {"title": "Report B", "author": "Alice Johnson", "tags": ["draft"]}]
    for ns, value in zip(names, values, strict=True):
        store.put(ns, f"item_{ns[-1]}", value)
    assert len(store.search((base, "documents"))) == 2
    assert len(store.search((base, "reports"))) == 2
    first, second = store.search((base,), limit=2), store.search((base,), limit=2, offset=2)
    assert len(first) == len(second) == 2
    assert {i.key for i in first}.isdisjoint({i.key for i in second})
    assert len(store.search((base,))) == 4
    assert len(store.search((base,), filter={"author": "John Doe"})) == 2
    drafts = store.search((base,), filter={"tags": ["draft"]})
    assert len(drafts) == 2 and all("draft" in i.value["tags"] for i in drafts)


def test_lg_sql_injection_filter_values(store: GitStateStore) -> None:
    store.put(("docs",), "doc1", {"access": "public", "title": "Public Document"})
    store.put(("docs",), "doc2", {"access": "private", "title": "Private Document"})
    for bad in ["public' OR '1'='1", "public'; --", "public' UNION SELECT * FROM store --",
                "''''", "public' OR 'א'='א"]:
        assert store.search(("docs",), filter={"access": bad}) == []
    store.put(("docs",), "doc4", {"title": "O'Brien's Document", "access": "public"})
    found = store.search(("docs",), filter={"title": "O'Brien's Document"})
    assert [i.key for i in found] == ["doc4"]
    assert store.search(("docs",), filter={"access') = 'public' OR '1'='1": "x"}) == []


def test_lg_numeric_filter_safety(store: GitStateStore) -> None:
    for i, price in enumerate([10, 20, 30], 1):
        store.put(("items",), f"item{i}", {"price": price, "quantity": 6 - 2 * i})
    assert len(store.search(("items",), filter={"price": {"$gt": 15}})) == 2
    assert len(store.search(("items",), filter={"price": {"$lt": float("inf")}})) == 3
    assert len(store.search(("items",), filter={"price": {"$gt": float("-inf")}})) == 3
    assert store.search(("items",), filter={"price": {"$eq": float("nan")}}) == []
    assert len(store.search(("items",), filter={"price": {"$lt": 10**100}})) == 3
    store.put(("items",), "item4", {"price": -10, "quantity": 0})
    assert [i.key for i in store.search(("items",), filter={"price": {"$lt": 0}})] == ["item4"]


def test_lg_boolean_filter_safety(store: GitStateStore) -> None:
    store.put(("flags",), "flag1", {"active": True, "name": "Feature A"})
    store.put(("flags",), "flag2", {"active": False, "name": "Feature B"})
    store.put(("flags",), "flag3", {"active": True, "name": "Feature C"})
    assert len(store.search(("flags",), filter={"active": True})) == 2
    assert [i.key for i in store.search(("flags",), filter={"active": False})] == ["flag2"]


def test_lg_filter_keys_with_hyphens_and_digits(store: GitStateStore) -> None:
    store.put(("docs",), "hyphen", {"access-level": "public",
                                    "user": {"access-level": "nested"}})
    store.put(("docs",), "digit", {"123abc": "ok", "user": {"123abc": "ok2"}})
    assert [r.key for r in store.search(("docs",), filter={"access-level": "public"})] == \
        ["hyphen"]
    assert [r.key for r in store.search(("docs",), filter={"user.access-level": "nested"})] \
        == ["hyphen"]
    assert [r.key for r in store.search(("docs",), filter={"123abc": "ok"})] == ["digit"]
    assert [r.key for r in store.search(("docs",), filter={"user.123abc": "ok2"})] == \
        ["digit"]


def _namespaces(store: GitStateStore, prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
    return {item.namespace for item in store.search(prefix, limit=100)}


def test_lg_search_namespace_segment_boundary(store: GitStateStore) -> None:
    for namespace in [("foo",), ("foo", "child"), ("foo", "child", "deep"), ("foobar",),
                      ("foobar", "baz"), ("foo2",)]:
        store.put(namespace, "k", {"v": 1})
    assert _namespaces(store, ("foo",)) == {("foo",), ("foo", "child"),
                                            ("foo", "child", "deep")}
    assert _namespaces(store, ("foobar",)) == {("foobar",), ("foobar", "baz")}
    assert _namespaces(store, ("foo2",)) == {("foo2",)}
    assert _namespaces(store, ("fo",)) == set()


def test_lg_search_namespace_wildcard_chars_are_literal(store: GitStateStore) -> None:
    for namespace in [("user_1",), ("user_1", "child"), ("userX1",), ("a%b",), ("axxb",),
                      ("star*",), ("starX",)]:
        store.put(namespace, "k", {"v": 1})
    assert _namespaces(store, ("user_1",)) == {("user_1",), ("user_1", "child")}
    assert _namespaces(store, ("a%b",)) == {("a%b",)}
    assert _namespaces(store, ("star*",)) == {("star*",)}


def test_lg_search_namespace_is_case_sensitive(store: GitStateStore) -> None:
    store.put(("Foo",), "k", {"v": "upper"})
    store.put(("foo",), "k", {"v": "lower"})
    assert _namespaces(store, ("foo",)) == {("foo",)}
    assert _namespaces(store, ("Foo",)) == {("Foo",)}


def test_lg_list_namespaces_segment_boundary(store: GitStateStore) -> None:
    for namespace in [("foo",), ("foo", "child"), ("foobar",), ("foobar", "baz"),
                      ("uid", "users", "alice"), ("uid", "users", "malice"),
                      ("uid", "a", "b", "alice")]:
        store.put(namespace, "k", {"v": 1})
    assert set(store.list_namespaces(prefix=["foo"], limit=100)) == {("foo",),
                                                                     ("foo", "child")}
    assert set(store.list_namespaces(suffix=["alice"], limit=100)) == {
        ("uid", "users", "alice"), ("uid", "a", "b", "alice")}
    assert set(store.list_namespaces(prefix=["uid", "*", "alice"], limit=100)) == {
        ("uid", "users", "alice")}
    assert set(store.list_namespaces(prefix=["uid"], limit=100)) == {
        ("uid", "users", "alice"), ("uid", "users", "malice"), ("uid", "a", "b", "alice")}


def test_lg_search_empty_prefix_is_unconstrained(store: GitStateStore) -> None:
    for namespace in [("a",), ("b", "c"), ("d", "e", "f")]:
        store.put(namespace, "k", {"v": 1})
    assert _namespaces(store, ()) == {("a",), ("b", "c"), ("d", "e", "f")}


def test_lg_namespace_labels_with_trailing_newline(store: GitStateStore) -> None:
    store.put(("users", "alice"), "k", {"v": 1})
    store.put(("users", "alice\n"), "k", {"v": 2})
    assert set(store.list_namespaces(suffix=["alice"], limit=100)) == {("users", "alice")}
    assert set(store.list_namespaces(prefix=["users", "alice"], limit=100)) == {
        ("users", "alice")}


def test_lg_list_namespaces_metacharacter_labels(store: GitStateStore) -> None:
    pairs = [("star*", "starX"), ("q?m", "qXm"), ("br[ack]et", "brXacXket"),
             ("user_1", "userX1"), ("a%b", "axxb"), ("plus+", "plusX")]
    for label, decoy in pairs:
        store.put((label,), "k", {"v": 1})
        store.put((decoy,), "k", {"v": 1})
        store.put((label, "child"), "k", {"v": 1})
    for label, decoy in pairs:
        found = set(store.list_namespaces(prefix=[label], limit=100))
        assert found == {(label,), (label, "child")}
        assert (decoy,) not in found
        assert set(store.list_namespaces(prefix=[label, "child"], limit=100)) == {
            (label, "child")}


# -- ported: libs/checkpoint/tests/test_store.py (the in-memory store's) -------------------

def test_lg_list_namespaces_basic(store: GitStateStore) -> None:
    names = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"),
             ("a", "c", "f"), ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"),
             ("admin", "users", "789")]
    for i, ns in enumerate(names):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    ab = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(store.list_namespaces(prefix=("a", "b"))) == ab
    assert sorted(store.list_namespaces(suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f"),
                                                           ("b", "a", "f")]
    assert sorted(store.list_namespaces(prefix=("a",), suffix=("f",))) == [("a", "b", "f"),
                                                                          ("a", "c", "f")]
    assert sorted(store.list_namespaces(prefix=("a", "b"), max_depth=3)) == [
        ("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == ab[:2]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == ab[2:]
    assert sorted(store.list_namespaces(prefix=("a", "*", "f"))) == [("a", "b", "f"),
                                                                    ("a", "c", "f")]
    assert sorted(store.list_namespaces(suffix=("*", "f"))) == [("a", "b", "f"),
                                                               ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]


def test_lg_list_namespaces_with_wildcards(store: GitStateStore) -> None:
    names = [("users", "123"), ("users", "456"), ("users", "789", "settings"),
             ("admin", "users", "789"), ("guests", "123"), ("guests", "456", "preferences")]
    for i, ns in enumerate(names):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(prefix=("users", "*"))) == [
        ("users", "123"), ("users", "456"), ("users", "789", "settings")]
    assert store.list_namespaces(suffix=("*", "preferences")) == [
        ("guests", "456", "preferences")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []


def test_lg_list_namespaces_pagination(store: GitStateStore) -> None:
    for i in range(20):
        store.put(namespace=("namespace", f"sub_{i:02d}"), key=f"id_{i:02d}",
                  value={"data": f"value_{i:02d}"})
    for offset in (0, 5, 15):
        assert store.list_namespaces(prefix=("namespace",), limit=5, offset=offset) == [
            ("namespace", f"sub_{i:02d}") for i in range(offset, offset + 5)]


def test_lg_list_namespaces_max_depth(store: GitStateStore) -> None:
    for i, ns in enumerate([("a", "b", "c", "d"), ("a", "b", "c", "e"), ("a", "b", "f"),
                            ("a", "g"), ("h", "i", "j", "k")]):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(max_depth=2)) == [("a", "b"), ("a", "g"), ("h", "i")]


def test_lg_list_namespaces_no_conditions_and_empty_store(store: GitStateStore) -> None:
    assert store.list_namespaces() == []
    names = [("a", "b"), ("c", "d"), ("e", "f", "g")]
    for i, ns in enumerate(names):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces()) == names


@pytest.mark.anyio
async def test_lg_cannot_put_empty_namespace(store: GitStateStore) -> None:
    doc = {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", doc)
        with pytest.raises(InvalidNamespaceError):
            await store.aput(bad, "foo", doc)
    ns = ("foo", "langgraph", "foo")
    await store.aput(ns, "bar", doc)
    got = await store.aget(ns, "bar")
    assert got is not None and got.value == doc
    assert (await store.asearch(ns, query="bar"))[0].value == doc
    await store.adelete(ns, "bar")
    assert await store.aget(ns, "bar") is None
    # past the public put: LangGraph's own root label, by batch
    await store.abatch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert (await store.asearch(("langgraph", "foo")))[0].value == doc
    await store.adelete(("langgraph", "foo"), "bar")
    assert await store.aget(("langgraph", "foo"), "bar") is None
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("foo.bar",), "k", doc)])  # a label never addresses another


# -- ported: libs/checkpoint-sqlite/tests/test_async_store.py ------------------------------

@pytest.mark.anyio
async def test_lg_large_batches_async(store: GitStateStore) -> None:
    n, m = 4, 2  # the original's 100 x 10 is a commit each: bench-sized, not suite-sized
    coros: list[Any] = []
    for j in range(m):
        ns = ("test", "foo", "bar", "baz", str(j % 2))
        for i in range(n):
            coros += [store.aput(ns, f"key{i}", value={"foo": f"bar{i}"}),
                      asyncio.create_task(store.aget(ns, f"key{i}")),
                      asyncio.create_task(store.alist_namespaces(prefix=None,
                                                                 max_depth=j + 1)),
                      asyncio.create_task(store.asearch(("test",))),
                      store.aput(ns, f"key{i}", value={"foo": f"bar{i}"}),
                      store.adelete(ns, f"key{i}")]
    results = await asyncio.gather(*coros)
    assert len(results) == m * n * 6


@pytest.mark.anyio
async def test_lg_abatch_order_and_basic_ops(store: GitStateStore) -> None:
    await store.aput(("test", "foo"), "key1", {"data": "value1"})
    await store.aput(("test", "bar"), "key2", {"data": "value2"})
    results = await store.abatch([
        GetOp(namespace=("test", "foo"), key="key1"),
        PutOp(namespace=("test", "bar"), key="key2", value={"data": "value2"}),
        SearchOp(namespace_prefix=("test",), filter={"data": "value1"}, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        GetOp(namespace=("test",), key="key3"),
    ])
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
    assert results[1] is None and results[4] is None
    assert isinstance(results[3], list) and len(results[3]) == 2
    namespace = (uuid.uuid4().hex, "test", "documents")
    await store.aput(namespace, "doc1", {"title": "Test Document"})
    first = await store.aget(namespace, "doc1")
    await asyncio.sleep(1.01)
    await store.aput(namespace, "doc1", {"title": "Updated Test Document"})
    later = await store.aget(namespace, "doc1")
    assert first is not None and later is not None
    assert later.updated_at > first.updated_at and later.created_at == first.created_at
    assert (namespace) in await store.alist_namespaces(prefix=namespace[:2])
    await store.adelete(namespace, "doc1")
    assert await store.asearch(namespace[:2], limit=10) == []


# -- gitstate's own ------------------------------------------------------------------------

def test_every_put_and_delete_is_one_audited_commit_with_its_reason(
        store: GitStateStore) -> None:
    state = store.repo.state_dir
    before = int(git(state, "rev-list", "--count", "main").stdout) if GIT else 0
    store.put(("memories", "User-1"), "food", {"likes": "dumplings"},
              reason="the user said they like dumplings")
    store.put(("memories", "User-1"), "food", {"likes": "noodles"})
    with store.reason("the user changed their mind"):
        store.delete(("memories", "User-1"), "food")
    store.delete(("memories", "User-1"), "food")  # absent: nothing to record
    history = store.history(("memories", "User-1"), "food")
    assert [(r["op"], r["reason"]) for r in history] == [
        ("clear", "the user changed their mind"),
        ("set", 'LangGraph store: put "food" in memories/User-1'),
        ("set", "the user said they like dumplings")]
    assert history[1]["old"] == {"likes": "dumplings"}
    assert history[1]["new"] == {"likes": "noodles"}
    if GIT is not None:
        assert int(git(state, "rev-list", "--count", "main").stdout) == before + 3
        log = git(state, "log", "--format=%s|%(trailers:key=Gitstate-Key,valueonly)",
                  "-3").stdout
        assert "the user said they like dumplings|store.memories._user-1.food" in log
        assert git(state, "log", "-1", "--format=%(trailers:key=Gitstate-Op,valueonly)"
                   ).stdout.strip() == "clear"


def test_an_item_with_a_ttl_expires_and_stays_in_history(store: GitStateStore) -> None:
    store.put(("session",), "scratch", {"note": "call back at noon"}, ttl=30)
    entry = store.entry(("session",), "scratch")
    assert entry is not None and entry.expires_at is not None
    assert entry.reason == 'LangGraph store: put "scratch" in session'
    later = store.repo.now() + timedelta(minutes=31)
    store.repo.engine.clock = lambda: later
    assert store.get(("session",), "scratch") is None
    assert store.search(("session",)) == []
    assert store.get(("session",), "scratch", refresh_ttl=True) is None
    assert store.sweep() == 1
    assert [r["op"] for r in store.history(("session",), "scratch")] == ["clear", "set"]


def test_a_read_that_asks_for_it_refreshes_a_ttl_with_a_commit(store: GitStateStore) -> None:
    store.put(("session",), "scratch", {"note": "call back"}, ttl=60)
    start = store.repo.now()
    store.repo.engine.clock = lambda: start + timedelta(minutes=50)
    assert store.get(("session",), "scratch") is not None  # refresh on read: off
    assert len(store.history(("session",), "scratch")) == 1
    assert store.get(("session",), "scratch", refresh_ttl=True) is not None
    entry = store.entry(("session",), "scratch")
    assert entry is not None and entry.expires_at is not None
    assert entry.expires_at > (start + timedelta(minutes=100)).strftime("%Y-%m-%dT%H:%M:%SZ")
    store.repo.engine.clock = lambda: start + timedelta(minutes=90)
    assert store.get(("session",), "scratch") is not None


def test_the_key_tables_rules_and_caps_apply_to_items(tmp_path: Path) -> None:
    with GitStateStore(tmp_path / "agent") as s:  # the default caps: 32 live keys
        with pytest.raises(InvalidInput) as secret:
            s.put(("memories",), "token", {"text": "ghp_" + "a1B2c3D4" * 5})
        assert secret.value.rule.startswith("secret.")
        with pytest.raises(InvalidInput) as shape:
            s.put(("memories",), "note", {"text": "two\nlines"})
        assert shape.value.rule == "value.control"
        with pytest.raises(InvalidInput) as long_key:
            s.put(("memories",), "k" * 130, {"v": 1})
        assert long_key.value.rule == "key.too_long"
        with pytest.raises(GitStateError) as capped:
            for i in range(40):
                s.put(("memories",), f"fact-{i:02d}", {"v": i})
        assert isinstance(capped.value, KeyCapReached | GitStateError)
        assert capped.value.rule in ("keys.cap", "section.max_bytes")
        assert s.search(("memories",), limit=100)  # what was written stays
        assert s.get(("memories",), "token") is None


def test_a_look_alike_item_is_refused_naming_the_items_and_the_rule(
        store: GitStateStore) -> None:
    """The key table refuses keys that look alike (key.confusable); the Store says so in
    its own terms: both items, their namespaces and the rule, not only the escaped keys."""
    store.put(("memories", "u1"), "model", {"v": 262})
    store.put(("memories", "u1"), "a0", {"v": 1})
    for key in ("rnodel", "ao"):
        with pytest.raises(InvalidInput) as twin:
            store.put(("memories", "u1"), key, {"v": 0})
        assert twin.value.rule == "key.confusable"
        text = twin.value.message
        assert f'item "{key}" in namespace "memories/u1"' in text
        assert "rule key.confusable" in text and "the existing item" in text
        assert twin.value.details["item"] == ["memories", "u1", key]
    assert twin.value.details["existing_item"] == ["memories", "u1", "a0"]
    assert sorted(i.key for i in store.search(("memories",))) == ["a0", "model"]
    if GIT is not None:  # nothing of the refused puts reached git
        log = git(store.repo.state_dir, "log", "--format=%B", "main").stdout
        assert "u1.rnodel" not in log and "u1.ao" not in log


@pytest.mark.parametrize("where", ["key", "namespace"])
def test_a_name_with_a_lone_surrogate_is_refused_at_put(store: GitStateStore,
                                                        where: str) -> None:
    """A lone surrogate in a key or a namespace label escapes into the key alphabet but
    never decodes back: such an item was written and then unreadable (get None, search and
    list_namespaces without it). It is refused at put, naming the rule."""
    namespace, key = (("m",), "k\ud800") if where == "key" else (("m\udc00",), "k")
    before = store.repo.head()
    with pytest.raises(InvalidInput) as refused:
        store.put(namespace, key, {"v": 1})
    assert refused.value.rule == "key.encoding"
    assert "lone surrogate" in refused.value.message and "never read back" in \
        refused.value.message
    assert store.repo.head() == before
    assert store.search(()) == [] and store.list_namespaces() == []
    store.put(("m",), "k\u00e9", {"v": 2})  # any character UTF-8 encodes round-trips
    found = store.get(("m",), "k\u00e9")
    assert found is not None and found.value == {"v": 2}


def test_a_schema_declares_the_items_like_any_key(store: GitStateStore) -> None:
    store.repo.set_schema('version: 1\nkeys:\n  "store.memories.*":\n    type: object\n'
                          '    fields: {fact: {type: string}}\n    ttl_hours: 24\n',
                          "memories are facts, kept a day")
    store.put(("memories", "u1"), "food", {"fact": "likes dumplings"})
    entry = store.entry(("memories", "u1"), "food")
    assert entry is not None and entry.expires_at is not None  # the schema's TTL
    with pytest.raises(InvalidInput) as closed:
        store.put(("memories", "u1"), "age", {"years": 40})
    assert "store.memories.u1.age.fact" in closed.value.message
    with pytest.raises(InvalidInput) as unknown:
        store.put(("notes",), "k", {"fact": "x"})
    assert unknown.value.rule == "schema.unknown_key"


def test_other_keys_of_the_table_are_not_items(store: GitStateStore) -> None:
    store.repo.set("stop_loss.2317", 262, "the stop-loss rule")
    store.repo.set("store.scalar.k", 5, "a scalar under the prefix")
    store.put(("m",), "k", {"v": 1})
    assert store.list_namespaces() == [("m",)]
    assert [i.key for i in store.search(())] == ["k"]


# -- a react agent with long-term memory -----------------------------------------------------

def _agent_model(calls: list[list[dict[str, Any]]]) -> Any:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class ToolCallingFake(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    messages = []
    for i, batch in enumerate(calls):
        messages.append(AIMessage(content="", id=f"m{i}", tool_calls=[
            {"name": c["name"], "args": c["args"], "id": f"call-{i}-{j}", "type": "tool_call"}
            for j, c in enumerate(batch)]) if batch else AIMessage(content="done", id=f"m{i}"))
    return ToolCallingFake(messages=iter(messages))


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_a_react_agent_keeps_long_term_memory_in_gitstate(tmp_path: Path) -> None:
    @tool
    def remember(fact: str, why: str,
                 store: Annotated[BaseStore, InjectedStore()]) -> str:
        """Keep a fact about the user for later conversations."""
        store.put(("memories", "user-7"), fact.split()[0].lower(), {"fact": fact},
                  reason=why)
        return "kept"

    @tool
    def recall(store: Annotated[BaseStore, InjectedStore()]) -> str:
        """What is known about the user."""
        return "; ".join(i.value["fact"] for i in store.search(("memories", "user-7")))

    agent = roomy(tmp_path / "agent")
    with GitStateStore(agent) as store, GitCheckpointSaver(agent) as saver:
        first = create_react_agent(_agent_model([
            [{"name": "remember", "args": {"fact": "Dumplings are their favourite food",
                                           "why": "the user said so in chat 1"}}], []]),
            [remember, recall], store=store, checkpointer=saver)
        first.invoke({"messages": [("user", "I love dumplings")]},
                     {"configurable": {"thread_id": "chat-1"}})
        second = create_react_agent(_agent_model([[{"name": "recall", "args": {}}], []]),
                                    [remember, recall], store=store, checkpointer=saver)
        out = second.invoke({"messages": [("user", "what do I like?")]},
                            {"configurable": {"thread_id": "chat-2"}})
        tool_answers = [m.content for m in out["messages"] if m.type == "tool"]
        assert tool_answers == ["Dumplings are their favourite food"]
        item = store.get(("memories", "user-7"), "dumplings")
        assert item is not None and store.entry(("memories", "user-7"), "dumplings") \
            .reason == "the user said so in chat 1"
    if GIT is None:
        return
    state = agent / "state"
    log = git(state, "log", "--format=%s%n%b", "-1", "main").stdout
    assert log.splitlines()[0] == "the user said so in chat 1"
    assert "Gitstate-Key: store.memories.user-7.dumplings" in log
    assert 'Gitstate-New: {"fact":"Dumplings are their favourite food"}' in log
    threads = git(state, "for-each-ref", "--format=%(refname)",
                  "refs/gitstate/threads/").stdout
    assert "chat-1" in threads and "chat-2" in threads
    assert_fsck_clean(state)
