"""The action format of VisGym's SFT recipe, and a strict parser for model answers.

An action is ``('move', d)`` (``d``: 0 right, 1 up, 2 left, 3 down) or ``('stop', 'stop')``, alone or as the whole
content of one ``<action>...</action>`` block; model text is matched by regular expressions, never evaluated.
"""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_ANSWER_CHARS = 2000

# (row, col) offset of one move in each direction, as in VisGym's maze_2d.
DIRECTION_STEPS: dict[int, tuple[int, int]] = {0: (0, 1), 1: (-1, 0), 2: (0, -1), 3: (1, 0)}

_ACTION_BLOCK = re.compile(r"<action>(.*?)</action>", re.DOTALL)
_ACTION_TAG = re.compile(r"</?action>")
# One tuple: a quoted name, a comma, a payload without parentheses (stripped afterwards; no
# overlapping whitespace quantifiers, so matching stays linear). The name quotes must match.
_TUPLE = re.compile(r"""\(\s*(['"])([A-Za-z_]+)\1\s*,([^()]*)\)""")
_DIRECTION = re.compile(r"[0-3]")
_STOP_PAYLOAD = re.compile(r"""(['"])stop\1""")


class ActionParseError(ValueError):
    """The model's answer is not exactly one well-formed action."""


class Action(NamedTuple):
    """A parsed action; equal to the VisGym tuple, e.g. ``Action("move", 0) == ("move", 0)``."""

    name: str
    arg: int | str

    def to_text(self) -> str:
        """The canonical answer text, e.g. ``('move', 0)`` or ``('stop', 'stop')``."""
        return f"({self.name!r}, {self.arg!r})"


STOP = Action("stop", "stop")


def parse_action(text: str) -> Action:
    """Parse one model answer into an :class:`Action` (format in the module docstring).

    Raises:
        ActionParseError: with a readable reason when ``text`` is not exactly one valid action.
    """
    if not isinstance(text, str):
        raise ActionParseError(f"answer must be text, got {type(text).__name__}")
    if len(text) > MAX_ANSWER_CHARS:
        raise ActionParseError(f"answer is too long ({len(text)} > {MAX_ANSWER_CHARS} characters)")
    body = _action_body(text).strip()
    if not body:
        raise ActionParseError("answer is empty; expected ('move', d) or ('stop', 'stop')")
    tuples = list(_TUPLE.finditer(body))
    if len(tuples) > 1:
        raise ActionParseError(f"expected exactly one action, found {len(tuples)}")
    if not tuples or tuples[0].span() != (0, len(body)):
        raise ActionParseError(
            f"expected exactly one action like ('move', 0) or ('stop', 'stop'), got {_preview(body)}"
        )
    _, name, payload = tuples[0].groups()
    payload = payload.strip()
    if name == "move":
        if not _DIRECTION.fullmatch(payload):
            raise ActionParseError(f"move direction must be 0, 1, 2 or 3, got {_preview(payload)}")
        return Action("move", int(payload))
    if name == "stop":
        if not _STOP_PAYLOAD.fullmatch(payload):
            raise ActionParseError(f"stop takes the argument 'stop', got {_preview(payload)}")
        return STOP
    raise ActionParseError(f"unknown action {_preview(name)}; expected 'move' or 'stop'")


def _action_body(text: str) -> str:
    """The text that must hold the tuple: the single ``<action>`` block, or the whole answer."""
    if not _ACTION_TAG.search(text):
        return text
    blocks = _ACTION_BLOCK.findall(text)
    tags = len(_ACTION_TAG.findall(text))
    if len(blocks) != 1 or tags != 2:
        raise ActionParseError("expected exactly one <action>...</action> block")
    return blocks[0]


def _preview(text: str, limit: int = 60) -> str:
    """A short, quoted excerpt of model text for error messages."""
    return repr(text if len(text) <= limit else text[:limit] + "...")
