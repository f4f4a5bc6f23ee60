"""Plain-text tables and JSON for the CLI's output."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from mazeops.failures import one_line


def plain(value: Any) -> Any:
    """`value` with DynamoDB Decimals turned into int/float and datetimes into ISO strings (for JSON)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [plain(item) for item in value]
    return value


def print_json(value: Any) -> None:
    """Print `value` as indented JSON (Decimals and datetimes converted)."""
    print(json.dumps(plain(value), indent=2, sort_keys=True))


def cell(value: Any) -> str:
    """The table text of one value: '-' for None, ISO seconds for datetimes, plain numbers."""
    if value is None or value == "":
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(plain(value))


def error_line(text: str) -> str:
    """A recorded error as one line: its first line, without a Ray job's log tail (`run show --logs` prints that)."""
    head, cut, _ = text.partition(" | log tail: ")
    first = head.strip().splitlines()[0] if head.strip() else ""
    return one_line(first) + (" (log tail: --logs)" if cut else "")


def rate(value: Any) -> str:
    """A solve rate as `0.625`, or '-' when there is none."""
    return "-" if value is None else f"{float(value):.3f}"


def render_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces, with a header line; '(none)' when empty."""
    texts = [[cell(value) for value in row] for row in rows]
    if not texts:
        return "  ".join(columns) + "\n(none)"
    widths = [max(len(column), *(len(row[i]) for row in texts)) for i, column in enumerate(columns)]
    lines = [
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=False)).rstrip()
        for line in [list(columns), *texts]
    ]
    return "\n".join(lines)


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print `render_table(columns, rows)`."""
    print(render_table(columns, rows))
