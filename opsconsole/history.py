"""An execution's history as the console shows it: one row per event, and what happened in each state."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

MAX_DETAIL_CHARS = 300


@dataclass(frozen=True)
class EventRow:
    """One history event: id, time, type, the state it belongs to and a one-line detail (error, cause or resource)."""

    id: int
    timestamp: datetime
    type: str
    state: str
    detail: str
    failed: bool


def one_line(cause: str | None) -> str:
    """A cause as one line: the `errorMessage` of a Lambda error document, else the text with its whitespace folded."""
    if not cause:
        return ""
    try:
        document = json.loads(cause)
    except json.JSONDecodeError:
        document = None
    message = document.get("errorMessage") if isinstance(document, dict) else None
    text = message if isinstance(message, str) else cause
    return " ".join(text.split())[:MAX_DETAIL_CHARS]


def _failed(event_type: str) -> bool:
    return event_type.endswith(("Failed", "TimedOut"))


def _details(event: dict[str, Any]) -> dict[str, Any]:
    return next((value for key, value in event.items() if key.endswith("EventDetails")), {})


def _detail(details: dict[str, Any]) -> str:
    if details.get("error") or details.get("cause"):
        return " ".join(filter(None, (details.get("error"), one_line(details.get("cause")))))
    if details.get("resourceType"):
        return f"{details['resourceType']}:{details.get('resource', '')}"
    return ""


def event_rows(events: list[dict[str, Any]]) -> list[EventRow]:
    """The history events as rows, oldest first, each with the state entered last before it ('' before the first)."""
    rows, state = [], ""
    for event in events:
        details = _details(event)
        if event["type"].endswith("StateEntered"):
            state = details.get("name", "")
        rows.append(
            EventRow(event["id"], event["timestamp"], event["type"], state, _detail(details), _failed(event["type"]))
        )
    return rows


def state_marks(rows: list[EventRow], status: str) -> dict[str, str]:
    """State name -> mark of each state the execution entered, from its `event_rows` and its `status`.

    `failed`: an event in it failed or timed out (even if a Catch moved on), or it was entered last and the execution
    FAILED, TIMED_OUT or was ABORTED; `current`: entered last while the execution is RUNNING; else `visited`.
    """
    marks: dict[str, str] = {}
    for row in rows:
        if not row.state:
            continue
        if row.failed and row.type != "ExecutionFailed":
            marks[row.state] = "failed"
        else:
            marks.setdefault(row.state, "visited")
    last = next((row.state for row in reversed(rows) if row.type.endswith("StateEntered")), "")
    if last and status == "RUNNING":
        marks[last] = "current"
    if last and status in ("FAILED", "TIMED_OUT", "ABORTED"):
        marks[last] = "failed"
    return marks
