"""Who may claim a role across machines: a human decision, a write of a human-only key or a
runtime run event from another clone counts only when it is signed, in git's own format, by
a key the allowed signers give that role — checked by pull and by the real pre-receive
hook; and plain git verifies the same signatures (`git log --show-signature`,
`git verify-commit`) with the same allowed-signers file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.core.errors import GitStateError
from gitstate.runs.format import PREFIX
from tests.helpers import GIT, SigningKeys, git, install_pre_receive
from tests.store.test_wire import Snapshot, _rule_of

pytestmark = pytest.mark.skipif(GIT is None or shutil.which("ssh-keygen") is None,
                                reason="needs the git CLI and OpenSSH's ssh-keygen")
SCHEMA = """\
version: 1
unknown_keys: allow
keys:
  limit.daily: {type: integer, writers: [human]}
approvals:
  refund: {writers: [human], ttl_hours: 24}
"""
ARGS = {"order": "O-1", "amount": 120}
RUN = "refund-O-1"


class Pair:
    """A (whose runtime signs as runtime:a; its human signs only when given a key), a plain
    bare remote, a guarded one (the hook verifying by the same allowed signers) and B, a
    clone that verifies by them too."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.keys = SigningKeys(tmp / "keys", "human:alice", "runtime:a")
        self.plain = tmp / "srv" / "plain.git"
        self.guarded = tmp / "srv" / "guarded.git"
        for bare in (self.plain, self.guarded):
            subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(bare)],
                           check=True)
        install_pre_receive(self.guarded, tmp, trust_remote=False)
        git(self.guarded, "config", "gitstate.allowedSigners", str(self.keys.allowed))
        self.keys.config(tmp / "a", None)
        self.a = StateRepo.init(tmp / "a", signing_key=self.keys.keys["runtime:a"])
        self.a.set_schema(SCHEMA, "refunds and the daily limit are a human's")
        self.approval = self.a.approvals.request("refund", ARGS, "the customer asked")
        self.a.runs.start(RUN, description="refund O-1", criteria=["refunded"],
                          reason="the customer asked")
        self.a.store.set_remote_url(str(self.plain))
        self.a.push()
        git(self.plain, "push", "-q", str(self.guarded), "main", f"{PREFIX}{RUN}")
        self.b = tmp / "b"
        self.keys.config(self.b, None)
        StateRepo.clone(str(self.plain), self.b).close()
        with StateRepo(self.b) as b:
            b.pull()

    def human(self, principal: str | None) -> StateRepo:
        key = self.keys.keys[principal] if principal else None
        return StateRepo(self.a.agent_dir, writer="human", actor="alice", signing_key=key)

    def push_to_guarded(self, ref: str = "main") -> subprocess.CompletedProcess[str]:
        return subprocess.run([GIT or "git", "-C", str(self.plain), "push", str(self.guarded),
                               ref], capture_output=True, text=True, timeout=60, check=False)

    def b_pulls(self, transport: str = "path") -> GitStateError | None:
        from tests.hostile_git_server import served

        with served(transport, self.plain) as url, StateRepo(self.b) as b:
            b.store.set_remote_url(url)
            try:
                b.pull()
            except GitStateError as exc:
                return exc
            finally:
                b.store.set_remote_url(str(self.plain))
        return None


@pytest.fixture
def pair(tmp_path: Path) -> Pair:
    return Pair(tmp_path)


def _decide(pair: Pair, signer: str | None) -> None:
    with pair.human(signer) as human:
        human.approvals.approve(pair.approval, "the order checks out")
    pair.a.push()


def test_a_decision_signed_by_an_allowed_human_is_taken_and_git_verifies_it(
        pair: Pair) -> None:
    _decide(pair, "human:alice")
    pushed = pair.push_to_guarded()
    assert pushed.returncode == 0, pushed.stderr
    assert pair.b_pulls() is None
    with StateRepo(pair.b) as b:
        assert b.can_run("refund", ARGS)
    # the git CLI, the independent checker, with the same allowed-signers file
    shown = subprocess.run([GIT or "git", "-C", str(pair.b / "state"), "-c",
                            f"gpg.ssh.allowedSignersFile={pair.keys.allowed}", "log",
                            "--show-signature", "-1"], capture_output=True, text=True,
                           check=True)
    assert 'Good "git" signature for human:alice' in shown.stdout + shown.stderr, shown
    verified = subprocess.run([GIT or "git", "-C", str(pair.b / "state"), "-c",
                               f"gpg.ssh.allowedSignersFile={pair.keys.allowed}",
                               "verify-commit", "HEAD"], capture_output=True, text=True,
                              check=False)
    assert verified.returncode == 0, verified.stderr


@pytest.mark.parametrize("transport", ["path", "git", "http"])
@pytest.mark.parametrize(("signer", "rule"), [(None, "trust.unsigned"),
                                              ("runtime:a", "trust.wrong_role")])
def test_a_decision_not_signed_as_human_is_refused(pair: Pair, signer: str | None,
                                                   rule: str, transport: str) -> None:
    """Pulled over a path remote, git:// and smart HTTP, and pushed through the hook."""
    _decide(pair, signer)
    before = Snapshot(pair.b)
    err = pair.b_pulls(transport)
    assert err is not None and _rule_of(err) == rule, err
    before.unchanged()
    refused = pair.push_to_guarded()
    assert refused.returncode != 0 and f"[{rule}]" in refused.stderr, refused.stderr


def test_without_signers_a_claim_from_elsewhere_is_refused(pair: Pair) -> None:
    """B with no allowed signers and no trust in its remote cannot tell who decided."""
    (pair.b / "config.toml").write_text("", encoding="utf-8")
    _decide(pair, "human:alice")
    err = pair.b_pulls()
    assert err is not None and _rule_of(err) == "trust.unverified_claim", err


def test_a_human_only_key_needs_a_human_signature(pair: Pair) -> None:
    with pair.human(None) as human:
        human.set("limit.daily", 500, "raised for the sale")
    pair.a.push()
    err = pair.b_pulls()
    assert err is not None and _rule_of(err) == "trust.unsigned", err
    refused = pair.push_to_guarded()
    assert refused.returncode != 0 and "[trust.unsigned]" in refused.stderr, refused.stderr


@pytest.mark.parametrize("signed", [True, False])
def test_a_runtime_event_needs_a_runtime_signature(pair: Pair, signed: bool) -> None:
    key = pair.keys.keys["runtime:a"] if signed else None
    with StateRepo(pair.a.agent_dir, signing_key=key) as runtime:
        runtime.runs.event(RUN, {"type": "tool_result_recorded", "tool_call_id": "c1",
                                 "evidence_ref": "order:O-1",
                                 "observed_at": "2026-08-13T01:00:00Z"}, "looked it up")
    pair.a.push()
    err = pair.b_pulls()
    pushed = pair.push_to_guarded(f"{PREFIX}{RUN}")
    if signed:
        assert err is None
        assert pushed.returncode == 0, pushed.stderr
    else:
        assert err is not None and err.rule == "remote.run_invalid", err
        assert "[trust.unsigned]" in err.message, err.message
        assert pushed.returncode != 0 and "[trust.unsigned]" in pushed.stderr, pushed.stderr


# -- who pushed: the server's pushers file ----------------------------------------------------

PUSHERS = "alice human\nagent7 agent,runtime  # the agent's runtime, never a human\n"


def _pushers_server(pair: Pair) -> Path:
    server = pair.tmp / "srv" / "pushers.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(server)],
                   check=True)
    install_pre_receive(server, pair.tmp, trust_remote=False)
    (pair.tmp / "pushers").write_text(PUSHERS, encoding="utf-8")
    git(server, "config", "gitstate.pushers", str(pair.tmp / "pushers"))
    git(server, "config", "http.receivepack", "true")
    git(pair.plain, "push", "-q", str(server), "main")  # the request: no claim in it
    return server


def _push(pair: Pair, url: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([GIT or "git", "-C", str(pair.plain), "push", url, "main"],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **env})


@pytest.mark.parametrize(("user", "rule"), [("agent7", "trust.pusher_role"),
                                            ("mallory", "trust.unknown_pusher"),
                                            ("alice", None)])
def test_the_hook_maps_the_pusher_authenticated_by_http(pair: Pair, user: str,
                                                        rule: str | None) -> None:
    """`git http-backend` behind basic auth (REMOTE_USER): the agent's user cannot push a
    human decision, a user the pushers file does not name cannot push at all, the human
    can — no signature needed, the server knows who pushed."""
    from tests.hostile_git_server import smart_http

    server = _pushers_server(pair)
    _decide(pair, None)  # unsigned: only the pusher's identity can vouch for it
    users = {"alice": "pw-a", "agent7": "pw-7", "mallory": "pw-m"}
    with smart_http(server.parent, server.name, users=users) as url:
        out = _push(pair, url.replace("http://", f"http://{user}:{users[user]}@"))
    if rule is None:
        assert out.returncode == 0, out.stderr
        assert git(server, "rev-parse", "main").stdout == git(pair.plain, "rev-parse",
                                                              "main").stdout
    else:
        assert out.returncode != 0 and f"[{rule}]" in out.stderr, out.stderr


@pytest.mark.parametrize(("user", "ok"), [("agent7", False), ("alice", True)])
def test_the_hook_maps_the_pusher_gitolite_names(pair: Pair, user: str, ok: bool) -> None:
    """gitolite runs git-receive-pack with GL_USER set to the key's user: the same map."""
    server = _pushers_server(pair)
    _decide(pair, None)
    out = _push(pair, str(server), GL_USER=user)
    assert (out.returncode == 0) is ok, out.stderr
    if not ok:
        assert "[trust.pusher_role]" in out.stderr, out.stderr


# -- every way a claim can arrive ------------------------------------------------------------

def _pushed(pair: Pair, act: object) -> GitStateError | None:
    act(pair)  # type: ignore[operator]
    pair.a.push()
    return pair.b_pulls()


def _adopt_limit(pair: Pair) -> None:
    import json

    path = pair.a.state_dir / "working_state.json"
    data = json.loads(path.read_text())
    data["keys"]["limit.daily"] = {"value": 999, "set_at": "2026-08-13T01:00:00Z",
                                   "reason": "hand edit", "actor": "alice",
                                   "expires_at": None}
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    with pair.human(None) as human:
        human.adopt("a hand edit of the daily limit")


def _observe_limit(pair: Pair) -> None:
    with pair.human(None) as human:
        human.observations.register("sale", lambda state, payload: {"limit.daily": 999})
        human.observations.apply("sale", {"why": "the sale"})


def _unsigned_schema(pair: Pair) -> None:
    with StateRepo(pair.a.agent_dir) as unsigned:  # no signing key this time
        unsigned.set_schema(SCHEMA.replace("writers: [human]}", "writers: [agent, human]}", 1)
                            .replace("version: 1", "version: 2"), "let the agent set it")


@pytest.mark.parametrize("act", [_adopt_limit, _observe_limit, _unsigned_schema],
                         ids=["adopt", "observe", "schema"])
def test_a_claim_by_any_op_needs_its_signature(pair: Pair, act: object) -> None:
    """A human-only key changed by an adopted hand edit or an observation, and a schema
    change (the runtime's or a human's, never the agent's), all unsigned: refused by pull
    and by the hook."""
    err = _pushed(pair, act)
    assert err is not None and _rule_of(err) == "trust.unsigned", err
    refused = pair.push_to_guarded()
    assert refused.returncode != 0 and "[trust.unsigned]" in refused.stderr, refused.stderr


def test_a_schema_change_signed_by_the_runtime_is_taken(pair: Pair) -> None:
    with StateRepo(pair.a.agent_dir, signing_key=pair.keys.keys["runtime:a"]) as runtime:
        runtime.set_schema(SCHEMA.replace("version: 1", "version: 2"), "same, version 2")
    pair.a.push()
    assert pair.b_pulls() is None
    assert pair.push_to_guarded().returncode == 0


def test_an_unreadable_allowed_signers_file_is_named(pair: Pair) -> None:
    _decide(pair, "human:alice")
    (pair.b / "config.toml").write_text(
        f'[trust]\nallowed_signers = "{pair.tmp / "missing"}"\n', encoding="utf-8")
    err = pair.b_pulls()
    assert err is not None and _rule_of(err) == "trust.allowed_signers", err


def test_consume_approval_is_linearized_too(pair: Pair) -> None:
    """The low-level consume of two clones: the second one fetches the first's spend and is
    refused before it returns, local-first or not."""
    _decide(pair, "human:alice")
    with StateRepo(pair.b) as b:
        b.pull()
        b.approvals.consume(pair.approval, "refund", ARGS)
    from gitstate.core.errors import Refused

    with pytest.raises(Refused) as exc:
        pair.a.approvals.consume(pair.approval, "refund", ARGS)
    assert exc.value.rule == "approval.not_runnable"
