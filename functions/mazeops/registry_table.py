"""The registry table's key and reads, shared by the adapter rows, champion pointers and baselines.

Table key (`base_model_id`, `adapter_name`): every row belongs to one base model; `adapter_name`
is an adapter's name, the champion pointer's `#CHAMPION` or a baseline's `#BASELINE#<sha256>`.
"""

from __future__ import annotations

from typing import Any

from mazeops.dynamo import from_item, to_item
from mazeops.names import validate_base_model_id


class RegistryTable:
    """The registry table, through a DynamoDB client: row keys, consistent reads and per-base-model queries."""

    def __init__(self, client: Any, table_name: str) -> None:
        self.client = client
        self.table_name = table_name

    def list_base_models(self) -> list[str]:
        """Base model ids that have at least one registry row, sorted."""
        paginator = self.client.get_paginator("scan")
        pages = paginator.paginate(TableName=self.table_name, ProjectionExpression="base_model_id")
        return sorted({from_item(item)["base_model_id"] for page in pages for item in page["Items"]})

    def _key(self, base_model_id: str, sort_key: str) -> dict[str, Any]:
        """The DynamoDB key of one row (the base model id validated)."""
        return to_item({"base_model_id": validate_base_model_id(base_model_id), "adapter_name": sort_key})

    def _get(self, base_model_id: str, sort_key: str) -> dict[str, Any] | None:
        """One row as a plain dict (a consistent read), or None."""
        answer = self.client.get_item(
            TableName=self.table_name, Key=self._key(base_model_id, sort_key), ConsistentRead=True
        )
        return from_item(answer["Item"]) if "Item" in answer else None

    def _query(self, base_model_id: str, begins_with: str | None = None) -> list[dict[str, Any]]:
        """Every row of a base model (whose sort key starts with `begins_with`, if given)."""
        condition = "base_model_id = :base"
        values = {":base": validate_base_model_id(base_model_id)}
        if begins_with is not None:
            condition += " AND begins_with(adapter_name, :prefix)"
            values[":prefix"] = begins_with
        pages = self.client.get_paginator("query").paginate(
            TableName=self.table_name, KeyConditionExpression=condition, ExpressionAttributeValues=to_item(values)
        )
        return [from_item(item) for page in pages for item in page["Items"]]
