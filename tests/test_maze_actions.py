"""The strict action parser: a table of accepted forms and of malformed or hostile answers."""

import ast
import builtins
import time

import pytest

from cluster_jobs.maze.actions import MAX_ANSWER_CHARS, STOP, Action, ActionParseError, parse_action

VALID = [
    ("('move', 0)", ("move", 0)),
    ("('move',1)", ("move", 1)),
    ('("move", 2)', ("move", 2)),
    ("  ( 'move' , 3 )  \n", ("move", 3)),
    ("('stop', 'stop')", ("stop", "stop")),
    ('("stop","stop")', ("stop", "stop")),
    ("<action>('move', 0)</action>", ("move", 0)),
    ("<action>\n ('stop', 'stop')\n</action>", ("stop", "stop")),
    (
        "<observation>I am top left.</observation>\n<justification>Right is open.</justification>\n"
        "<action> ('move', 0) </action>",
        ("move", 0),
    ),
    # Text outside the action block is ignored, even when it mentions other actions.
    ("<justification>('move', 1) hits a wall</justification><action>('move', 3)</action>", ("move", 3)),
]

MALFORMED = [
    ("", "empty"),
    ("   \n\t ", "empty"),
    ("('move', 4)", "direction"),
    ("('move', -1)", "direction"),
    ("('move', 1.0)", "direction"),
    ("('move', '0')", "direction"),
    ("('move', 01)", "direction"),
    ("('move', \u0663)", "direction"),  # ARABIC-INDIC DIGIT THREE
    ("('move', 0, 1)", "direction"),
    ("('move', 0) ('move', 1)", "found 2"),
    ("('move', 0)\n('stop', 'stop')", "found 2"),
    ("('jump', 0)", "unknown action"),
    ("('MOVE', 0)", "unknown action"),
    ("('stop', 'go')", "stop"),
    ("('stop')", "expected exactly one action"),
    ("move 0", "expected exactly one action"),
    ("right", "expected exactly one action"),
    ("I will move right: ('move', 0)", "expected exactly one action"),
    ("`('move', 0)`", "expected exactly one action"),
    ("```\n('move', 0)\n```", "expected exactly one action"),
    ("('move\", 0)", "expected exactly one action"),
    ("[('move', 0)]", "expected exactly one action"),
    ("(('move', 0))", "expected exactly one action"),
    ("('move', 0", "expected exactly one action"),
    ("\uff08'move', 0\uff09", "expected exactly one action"),  # full-width parentheses
    ("('move', 0)\x00", "expected exactly one action"),
    ("{'action': 'move', 'args': 0}", "expected exactly one action"),
    ("__import__('os').system('rm -rf /')", "expected exactly one action"),
    ("('move', __import__('os').getpid())", "expected exactly one action"),
    ("('move', 0)" * 200, "too long"),
    ("x" * (MAX_ANSWER_CHARS + 1), "too long"),
    ("<action>('move', 0)", "<action>"),
    ("('move', 0)</action>", "<action>"),
    ("<action>('move', 0)</action><action>('stop', 'stop')</action>", "<action>"),
    ("<action></action>", "empty"),
    ("<action>go right</action>", "expected exactly one action"),
    ("<action>('move', 0) ('move', 1)</action>", "found 2"),
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_valid_answers_parse(text, expected):
    action = parse_action(text)
    assert isinstance(action, Action)
    assert action == expected


@pytest.mark.parametrize(("text", "reason"), MALFORMED)
def test_malformed_answers_raise_a_readable_error(text, reason):
    with pytest.raises(ActionParseError, match=reason) as caught:
        parse_action(text)
    assert isinstance(caught.value, ValueError)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize("value", [None, b"('move', 0)", 3, ("move", 0)])
def test_non_text_is_rejected(value):
    with pytest.raises(ActionParseError, match="must be text"):
        parse_action(value)


def test_length_limit_is_inclusive():
    text = "('move', 0)".ljust(MAX_ANSWER_CHARS)
    assert parse_action(text) == ("move", 0)
    with pytest.raises(ActionParseError, match="too long"):
        parse_action(text + " ")


def test_canonical_text_round_trips():
    actions = [Action("move", d) for d in range(4)] + [STOP]
    assert [a.to_text() for a in actions] == [
        "('move', 0)",
        "('move', 1)",
        "('move', 2)",
        "('move', 3)",
        "('stop', 'stop')",
    ]
    assert [parse_action(a.to_text()) for a in actions] == actions


def test_model_text_is_never_evaluated(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("model text must not be evaluated")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(ast, "literal_eval", forbidden)
    assert parse_action("('move', 2)") == ("move", 2)
    assert parse_action("<action>('stop', 'stop')</action>") == STOP


@pytest.mark.parametrize(
    "text",
    [
        "('move', " + "\t" * 1989 + "x",  # took ~10 s with overlapping whitespace quantifiers
        "('move'," * 250,
        "<action>" * 250,
        "(" * MAX_ANSWER_CHARS,
    ],
)
def test_hostile_long_inputs_fail_fast(text):
    started = time.perf_counter()
    with pytest.raises(ActionParseError):
        parse_action(text)
    assert time.perf_counter() - started < 0.5
