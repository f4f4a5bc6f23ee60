"""The ops CLI's arguments are untrusted input too: whatever the text, a command answers or prints one
`mazeops-ops: error: ...` line and exits 2 (argparse's own usage errors exit 2 as well); nothing else gets out."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opsctl_testing import BASE, STACK, Deployment, seed_adapter

from opsctl.cli import main

ARGUMENT = st.text(st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ["", "-", "--", "--yes", "r1-step10", BASE, "../../etc/passwd", "a" * 5000, "9" * 5000, "-1", "NaN", "\x00"]
)
COMMANDS = [
    lambda x: ["run", "show", x],
    lambda x: ["run", "start", x, "--run-id", "r9"],
    lambda x: ["run", "start", __file__, "--run-id", x],
    lambda x: ["adapters", "leaderboard", x],
    lambda x: ["adapters", "lineage", x, "--json"],
    lambda x: ["adapters", "promote", BASE, x, "--yes"],
    lambda x: ["adapters", "promote", x, "r1-step10", "--yes"],
    lambda x: ["adapters", "rollback", x, "--yes"],
    lambda x: ["baseline", "show", x],
    lambda x: ["executions", "--status", x],
    lambda x: ["play", "--model", x, "--seed", "0"],
    lambda x: ["play", "--champion", "--base-model", BASE, "--seed", x],
]


@pytest.fixture
def board(deployment: Deployment, tmp_path, monkeypatch: pytest.MonkeyPatch) -> Deployment:
    """One adapter, and a scratch working directory (play writes its default PNG there)."""
    monkeypatch.chdir(tmp_path)
    seed_adapter(deployment, "r1", 10, solved=16)
    return deployment


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(st.sampled_from(range(len(COMMANDS))), ARGUMENT)
@example(1, "\x00")
@example(1, "a" * 5000)
@example(5, "\x00")
@example(10, "x" * 5000)
@example(11, "9" * 5000)
def test_any_argument_text_is_answered_or_refused_in_one_line(board, capsys, command: int, argument: str) -> None:
    argv = [*COMMANDS[command](argument), "--stack", STACK]
    try:
        status = main(argv)
    except SystemExit as usage:  # argparse: a usage line and `mazeops-ops ...: error: ...`, exit 2
        assert usage.code == 2
        assert "error:" in capsys.readouterr().err
        return
    err = capsys.readouterr().err
    assert status in (0, 1, 2)
    if status == 2:
        assert err.startswith("mazeops-ops: error: ") and err.count("\n") == 1, err


def test_a_nul_byte_in_an_output_path_is_a_one_line_error(board, capsys) -> None:
    assert main(["curve", "--out", "curve\x00.png", "--stack", STACK]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("mazeops-ops: error: cannot write 'curve\\x00.png': embedded null byte") and err.count("\n") == 1
    )
