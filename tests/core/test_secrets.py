"""Nothing secret enters history: a corpus of true positives (refused under their kind,
wherever they appear: a value, a string deep in a structure, a reason, a handoff) and of
near misses (committed); the secret is never echoed; the schema's audited way out; a pushed
or pulled commit carrying one is refused too (test_hostile_remote.py's attacks)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.core.errors import CasMismatch, InvalidInput
from gitstate.core.secretscan import scan

# built at run time, so that this file itself holds no secret-shaped literal
_B64 = "wJalrXUtnFEMI" + "K7MDENGbPxRfiCY" + "EXAMPLEKEY12"
TRUE = {
    "private_key": "-----BEGIN " + "RSA PRIVATE KEY-----",
    "openssh_key": "-----BEGIN " + "OPENSSH PRIVATE KEY-----",
    "aws_access_key": "AKIA" + "IOSFODNN7EXAMPL3",
    "aws_secret": "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "github_token": "ghp_" + "1234567890abcdefghijklmnopqrstuvwxyZ",
    "github_pat": "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ01",
    "gitlab_token": "glpat-" + "xxxxXXXXxxxx1234abcd",
    "slack_token": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKl",
    "slack_webhook": "https://hooks.slack.com/services/" + "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "jwt": "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0." + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "password": "password=" + "hunter2hunter2",
    "secret_colon": "client_secret: " + "s3cr3t-v4lue-9",
    "token_json": '"token": "' + "abc123def456ghi" + '"',
    "api_key": "API_KEY=" + "sk-live-0123456789",
    "high_entropy": _B64,
}
KIND = {"openssh_key": "private_key", "aws_secret": "aws_access_key",
        "github_pat": "github_token", "slack_webhook": "slack_token",
        "password": "assignment", "secret_colon": "assignment", "token_json": "assignment",
        "api_key": "assignment"}
NEAR_MISSES = [
    "the token was rotated yesterday", "password: ********", "token=none",
    "api_key=${API_KEY}", "secret: <redacted>", "PRIVATE KEY rotation is due",
    "commit 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b reverted",
    "sha256 229c53545db4275c413bc1d3efcbcb26f0a569cd00d53d43d82a1654414ef918",
    "ThisIsAVeryLongCamelCaseIdentifier2024", "WorkingStateSetToolDescriptionV2ForModel",
    "https://example.com/path/to/some/long/resource/Name2024Version",
    "stop_loss.2317 跌破即出場不猶豫", "AKIA is a prefix, not a key", "eyJ alone is not a JWT",
    "ghp_short", "xoxb-", "pwd=abc",
]


@pytest.mark.parametrize("name", sorted(TRUE))
def test_true_positives_are_refused_everywhere(repo: StateRepo, name: str) -> None:
    secret = TRUE[name]
    kind = KIND.get(name, name)
    found = scan(secret)
    assert found is not None and found.kind == kind, (name, found and found.kind)
    attempts = [
        lambda: repo.set("note", f"see {secret} here", "r"),
        lambda: repo.set("facts", {"inner": ["ok", {"deep": secret}]}, "r"),
        lambda: repo.set("k", 1, f"because {secret}"),
        lambda: repo.handoff(f"left it at {secret}"),
        lambda: repo.handoff("n", status="continue", next_steps=f"use {secret}"),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidInput) as exc:
            attempt()
        assert exc.value.rule == f"secret.{kind}", exc.value.message
        assert secret not in exc.value.message and secret[-12:] not in exc.value.message
    with pytest.raises(InvalidInput) as exc:
        repo.set("facts", {"inner": ["ok", {"deep": secret}]}, "r")
    assert exc.value.details["path"] == "facts.inner[1].deep"
    assert repo.state().keys == {} and repo.state().handoff is None


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_committed(repo: StateRepo, text: str) -> None:
    assert scan(text) is None, text
    repo.set("note", text, "an ordinary note")
    repo.set("facts", {"text": text}, f"also as a reason: {text}")
    assert repo.state().keys["note"].value == text


def test_the_schema_allows_one_key_and_refuses_another(repo: StateRepo) -> None:
    """The way out of a false positive is an audited schema change for one key; a key may
    also be declared never to hold a value at all."""
    repo.set_schema("version: 1\nunknown_keys: allow\nkeys:\n"
                    "  fixture.token: {type: string, secrets: allow}\n"
                    "  api.credentials: {type: json, sensitive: refuse}\n", "allow one key")
    repo.set("fixture.token", TRUE["jwt"], "a test fixture, not a live token")
    with pytest.raises(InvalidInput):
        repo.set("other", TRUE["jwt"], "r")  # other keys are still scanned
    with pytest.raises(InvalidInput) as exc:
        repo.set("fixture.token", "x", f"reasons are always scanned {TRUE['jwt']}")
    assert exc.value.rule == "secret.jwt"
    with pytest.raises(InvalidInput) as exc:
        repo.set("api.credentials", {"user": "svc"}, "r")
    assert exc.value.rule == "secret.sensitive_key"
    with pytest.raises(InvalidInput):
        repo.set_schema("version: 2\nkeys:\n  k: {type: string, secrets: maybe}\n", "bad")


def test_random_tokens_are_mostly_caught() -> None:
    """The generic detector: at least 3 in 4 random 40-character tokens (known formats have
    their own patterns); no hex digest."""
    import random
    import string

    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits
    tokens = ["".join(rng.choice(alphabet) for _ in range(40)) for _ in range(400)]
    assert sum(scan(t) is not None for t in tokens) >= 300
    digests = ["".join(rng.choice("0123456789abcdef") for _ in range(64)) for _ in range(200)]
    assert not any(scan(d) for d in digests)


REDACT = "version: 1\nunknown_keys: allow\nkeys:\n  broker.pin: {type: json, sensitive: redact}\n"


def test_a_redacted_key_keeps_only_a_keyed_hash(repo: StateRepo) -> None:
    """sensitive: redact: the history holds an HMAC under a key kept out of git; the
    section shows [redacted]; compare-and-swap works on the raw value."""
    import subprocess

    from tests.helpers import GIT

    repo.set_schema(REDACT, "the broker PIN is sensitive")
    repo.set("broker.pin", 482913, "rotated by the operator")
    stored = repo.state().keys["broker.pin"].value
    assert isinstance(stored, str) and stored.startswith("redacted:hmac-sha256:")
    assert "broker.pin = [redacted]" in repo.render(locale="en")
    key_file = repo.state_dir / ".git" / "gitstate-redact.key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and len(key_file.read_bytes()) == 32
    repo.set("broker.pin", 111111, "rotated again", expected="482913")  # as CAS compares
    with pytest.raises(CasMismatch) as exc:
        repo.set("broker.pin", 222222, "stale", expected=482913)
    assert exc.value.rule == "cas.mismatch" and "482913" not in exc.value.message
    assert "[redacted]" in exc.value.message
    if GIT is not None:
        log = subprocess.run([GIT, "-C", str(repo.state_dir), "log", "-p", "--all"],
                             capture_output=True, text=True, check=True).stdout
        assert "482913" not in log and "111111" not in log
        tracked = subprocess.run([GIT, "-C", str(repo.state_dir), "ls-files"],
                                 capture_output=True, text=True, check=True).stdout
        assert "redact" not in tracked
    with StateRepo(repo.agent_dir, writer="agent") as agent:  # any writer, same hash
        agent.set("broker.pin", 333333, "agent rotated", expected=111111)


def test_a_raw_value_on_a_redacted_key_is_refused(repo: StateRepo) -> None:
    """What bypasses the facade (a commit from elsewhere, a planner given a raw value) is
    refused by the whole-state check: only the keyed hash may be stored."""
    from gitstate.core.model import Entry, State
    from gitstate.write import checks

    repo.set_schema(REDACT, "sensitive")
    schema = repo.schema()
    before = repo.state()
    after = State({"broker.pin": Entry("482913", "2026-08-13T01:00:00Z", "r", "agent")})
    with pytest.raises(InvalidInput) as exc:
        checks.whole_state(before, after, repo.now(), repo.config, schema, None)
    assert exc.value.rule == "secret.not_redacted"


# -- every text that reaches an object or a ref name ------------------------------------

GH = TRUE["github_token"]


def _hex_token(rng_seed: int, length: int) -> str:
    import random
    import string

    rng = random.Random(rng_seed)
    alphabet = string.ascii_letters + string.digits + "!#%&*+-"
    return "".join(rng.choice(alphabet) for _ in range(length)).encode().hex()


def test_hex_encoded_tokens_of_any_length_are_refused(repo: StateRepo) -> None:
    """A token hex-encoded (a known format, or random text from 8 characters) is refused;
    digests, which decode to bytes that are not text, and hex-encoded words pass."""
    import hashlib

    for hexed in (GH.encode().hex(), GH.encode().hex().upper(), _hex_token(1, 8),
                  _hex_token(2, 24), _hex_token(3, 200), GH.encode().hex().encode().hex()):
        found = scan(f"payload {hexed} end")
        assert found is not None and found.kind in ("hex_encoded", "github_token"), hexed
        with pytest.raises(InvalidInput) as exc:
            repo.set("blob", hexed, "r")
        assert exc.value.rule.startswith("secret.") and hexed not in exc.value.message
    for digest in (hashlib.sha256(str(n).encode()).hexdigest() for n in range(300)):
        assert scan(digest) is None
    for harmless in (b"stop-loss at 262".hex(), b"hello_world_2024".hex(),
                     "0123456789abcdef0123"):
        assert scan(harmless) is None, harmless


def test_a_token_split_between_members_or_after_a_word_is_refused(repo: StateRepo) -> None:
    """The halves of a token in two members of one object (the member's name used to sit
    between them in the scanned text), and in two adjacent keys after a key whose value
    ends with a word character (which hid the format's word boundary), are refused."""
    with pytest.raises(InvalidInput) as exc:
        repo.set("creds.one", {"a": GH[:20], "b": GH[20:]}, "one object")
    assert exc.value.rule == "secret.github_token"
    repo.set("creds.a0", "x5", "a value ending in a word character")
    repo.set("creds.a1", GH[:20], "the first half alone is no secret")
    with pytest.raises(InvalidInput) as exc:
        repo.set("creds.a2", GH[20:], "the second half")
    assert exc.value.rule == "secret.github_token"


def test_a_token_split_across_adjacent_keys_is_refused(repo: StateRepo) -> None:
    """Two keys that hold the halves of one token: the write of the second half is
    refused (either order, in a structure too); short ids side by side are no token."""
    repo.set("creds.a", GH[:20], "the first half alone is no secret")
    with pytest.raises(InvalidInput) as exc:
        repo.set("creds.b", GH[20:], "the second half")
    assert exc.value.rule == "secret.github_token"
    assert "creds.a, creds.b together" in exc.value.message
    repo.clear("creds.a", "start again")
    repo.set("other.b", GH[20:], "the second half first")
    with pytest.raises(InvalidInput):
        repo.set("other.a", GH[:20], "then the first, before it in the file")
    random_token = _B64  # 40 random-looking characters, cut in two
    repo.set("x.1", random_token[:20], "r")
    with pytest.raises(InvalidInput) as exc:
        repo.set("x.2", random_token[20:], "r")
    assert exc.value.rule == "secret.high_entropy"
    with pytest.raises(InvalidInput):
        repo.set("parts", [GH[:15], GH[15:30], GH[30:]], "one structure")
    repo.set("ids", {"order": "O9x2Kq", "ticket": "T7bLm3", "user": "u4ZpQ1"}, "short ids")
    repo.clear("x.1", "done with it")
    repo.set("y.0", "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b", "a commit id")
    repo.set("y.1", "ABCDEFGHijkl1234", "r")
    repo.set("y.2", "stop-loss at 262", "a word after an id is not a token")


def test_names_ids_and_actors_are_scanned(repo: StateRepo) -> None:
    """A key name, a name inside a structure, a run id, an approval's tool name, an actor,
    a request id and schema.yaml (values, names, comments) are scanned like a value."""
    attempts = {
        "key name": lambda: repo.set(GH, 1, "r"),
        "name in a structure": lambda: repo.set("facts", {"inner": {GH: 1}}, "r"),
        "actor": lambda: repo.set("k", 1, "r", actor=GH),
        "request id": lambda: repo.set("k", 1, "r", request_id=GH),
        "run id": lambda: repo.runs.start(GH, description="d", criteria=["c"], reason="r"),
        "run request id": lambda: repo.runs.start("r1", description="d", criteria=["c"],
                                                  reason="r", request_id=GH),
        "tool name": lambda: repo.approvals.request(GH, {}, "r"),
        "schema description": lambda: repo.set_schema(
            f"version: 1\nkeys:\n  k: {{type: string, description: 'use {GH}'}}\n", "r"),
        "schema comment": lambda: repo.set_schema(f"version: 1  # {GH}\nkeys: {{}}\n", "r"),
    }
    for name, attempt in attempts.items():
        with pytest.raises(InvalidInput) as exc:
            attempt()
        assert exc.value.rule == "secret.github_token", (name, exc.value.rule)
        assert GH not in exc.value.message
    repo.set_schema("version: 1\nunknown_keys: allow\nkeys:\n"
                    "  api.token: {type: string}  # names a token, holds a reference\n", "ok")
    assert repo.state().keys == {} and repo.runs.listing() == []


def test_a_refusal_for_another_rule_keeps_no_secret(repo: StateRepo) -> None:
    """The refusal journal withholds every field that trips the scan, whatever rule
    refused the write: a stale compare-and-swap (raw or hex-encoded), a reserved key."""
    import subprocess

    from gitstate.history import refusalrecord, refusals
    from tests.helpers import GIT

    repo.set("k", 1, "r")
    for attempt, rule in (
            (lambda: repo.set("k", 2, "r", expected=GH), "cas.mismatch"),
            (lambda: repo.set("approval.x", GH, "r"), "approval.reserved"),
            (lambda: repo.set("k", 3, "r", expected=GH.encode().hex()), "cas.mismatch")):
        with pytest.raises(InvalidInput if rule != "cas.mismatch" else CasMismatch) as exc:
            attempt()
        assert exc.value.rule == rule
    records = list(refusals.entries(repo.store))
    assert len(records) == 3
    assert all(refusalrecord.WITHHELD in (r["expected"], r["attempted"]) for r in records)
    if GIT is not None:
        objects = subprocess.run([GIT, "-C", str(repo.state_dir), "cat-file",
                                  "--batch-all-objects", "--batch"], capture_output=True,
                                 check=True).stdout
        assert GH[:24].encode() not in objects and GH.encode().hex().encode() not in objects


def test_a_token_tried_in_every_input_reaches_no_object_and_no_ref(tmp_path: Path) -> None:
    """The sweep: one token (raw and hex-encoded) tried in every input of every surface —
    the Python API (keys, values, reasons, actors, the handoff, schema.yaml, approvals'
    tools and arguments, run ids and run events), the CLI, the MCP server over stdio, the
    LangGraph checkpointer (channel values, pending writes, the thread id) and a write
    refused for another rule (so the refusal journal records it) — then every object of
    the repository (`git cat-file --batch-all-objects --batch`) and every ref name: the
    token is nowhere."""
    import anyio

    from gitstate.core.errors import GitStateError
    from gitstate.langgraph import GitCheckpointSaver
    from tests.helpers import GIT, run_cli
    from tests.mcpclient import connect

    if GIT is None:
        pytest.skip("needs the git CLI")
    agent = tmp_path / "agent"
    token, hexed = GH, GH.encode().hex()
    attempts: list[Callable[[StateRepo], object]] = [
        lambda r: r.set(token, 1, "a key"),
        lambda r: r.set("k", token, "a value"),
        lambda r: r.set("k", {"nested": [hexed]}, "a hex-encoded value"),
        lambda r: r.set("k", 1, f"deploy with {token}"),
        lambda r: r.set("k", 1, "an actor", actor=token),
        lambda r: r.handoff(f"next: use {token}"),
        lambda r: r.set_schema(f"version: 1\nunknown_keys: allow\n# {token}\n", "schema"),
        lambda r: r.approvals.request(token, {"a": 1}, "a tool name"),
        lambda r: r.approvals.request("refund", {"card": token}, "approval arguments"),
        lambda r: r.runs.start(token, description="d", criteria=["c"], reason="a run id"),
        lambda r: r.runs.event("run-1", {"type": "question_opened", "question": token}, "q"),
        lambda r: r.set("k", token, "a stale compare-and-swap", expected=12345),
    ]
    with StateRepo.init(agent) as repo:
        repo.set_schema("version: 1\nunknown_keys: allow\napprovals:\n  refund: {}\n",
                        "refunds need a human")
        repo.set("k", 0, "first")
        repo.runs.start("run-1", description="d", criteria=["c"], reason="start")
        for attempt in attempts:
            with pytest.raises(GitStateError):
                attempt(repo)
    assert run_cli("set", "k", token, "--reason", "the cli", agent_dir=agent).returncode != 0

    async def over_mcp() -> None:
        async with connect(agent) as client:
            for args in ({"key": "k", "value": token, "reason": "mcp"},
                         {"key": token, "value": 1, "reason": "mcp"},
                         {"key": "k", "value": 1, "reason": f"mcp {token}"}):
                is_error, _, _ = await client.call("working_state_set", **args)
                assert is_error, args

    anyio.run(over_mcp)
    with GitCheckpointSaver(agent) as saver:
        config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
        checkpoint = {"v": 1, "id": "1ef", "ts": "2026-08-13T01:00:00+00:00",
                      "channel_values": {"messages": [f"the key is {token}"]},
                      "channel_versions": {"messages": "1"}, "versions_seen": {}}
        with pytest.raises(GitStateError):
            saver.put(config, checkpoint, {"source": "loop", "step": 1},  # type: ignore[arg-type]
                      {"messages": "1"})
        with pytest.raises(GitStateError):
            saver.put({"configurable": {"thread_id": token, "checkpoint_ns": ""}},
                      {**checkpoint, "channel_values": {}},  # type: ignore[arg-type]
                      {"source": "loop", "step": 1}, {})
        clean = saver.put(config, {**checkpoint, "channel_values": {}},  # type: ignore[arg-type]
                          {"source": "loop", "step": 1}, {})
        with pytest.raises(GitStateError):
            saver.put_writes(clean, [("messages", f"tool output: {hexed}")], "task-1")
    state = agent / "state"
    objects = subprocess.run([GIT, "-C", str(state), "cat-file", "--batch-all-objects",
                              "--batch"], capture_output=True, check=True).stdout
    refs = subprocess.run([GIT, "-C", str(state), "for-each-ref", "--format=%(refname)"],
                          capture_output=True, check=True, text=True).stdout
    for form in (token, hexed, token[:24]):
        assert form.encode() not in objects, form[:8]
        assert form not in refs, form[:8]
