"""The rows of a deployment's runs table."""

from __future__ import annotations

from typing import Any

from mazeops.dynamo import from_item
from opsctl.target import Target


def list_runs(target: Target) -> list[dict[str, Any]]:
    """Every row of the runs table, newest first."""
    client = target.client("dynamodb")
    rows = [
        from_item(item)
        for page in client.get_paginator("scan").paginate(TableName=target.runs_table)
        for item in page["Items"]
    ]
    return sorted(rows, key=lambda row: row.get("created_at") or "", reverse=True)
