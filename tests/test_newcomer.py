"""What a new user meets first: values that look like options, init in the wrong place, the
demo, hand edits that break the file, the MCP server run by hand, and small wording."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_cli


def _value(agent: Path, key: str) -> object:
    return json.loads(run_cli("get", "--json", agent_dir=agent).stdout)["keys"][key]["value"]


def test_a_negative_number_is_a_value(tmp_path: Path) -> None:
    """`set offset -5` stores -5; `--` before a value starting with - works, with the
    options after it; other dash words stay options (and a typo says how to give one)."""
    run_cli("init", agent_dir=tmp_path)
    for args, want in ((["offset", "-5", "--reason", "r"], -5),
                       (["offset", "--", "-6", "--reason", "r"], -6),
                       (["offset", "--reason", "r", "--", "-7"], -7),
                       (["offset", "-r", "r", "-0.25"], -0.25),
                       (["offset", "-8", "-r", "r", "--expect", "-0.25"], -8),
                       (["note", "--", "-x", "-r", "r"], "-x")):
        out = run_cli("set", *args, agent_dir=tmp_path)
        assert out.returncode == 0, (args, out.stderr)
        assert _value(tmp_path, args[0]) == want, args
    out = run_cli("set", "note", "-y", "-r", "r", agent_dir=tmp_path)
    assert out.returncode == 2 and "gitstate set KEY -- -y" in out.stderr
    out = run_cli("set", "note", "1", "--reasn", "r", agent_dir=tmp_path)
    assert out.returncode == 2 and "--reason" in out.stderr
    assert "set offset -5" in run_cli("set", "--help").stdout
