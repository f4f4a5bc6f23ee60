"""Conversions between plain Python values and DynamoDB's typed attribute values, and update expressions.

The tables are used through the low-level client (one API for single writes and TransactWriteItems).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def to_attribute(value: Any) -> dict[str, Any]:
    """One Python value as a DynamoDB attribute value (floats become exact decimal strings)."""
    return _serializer.serialize(_decimals(value))


def to_item(values: dict[str, Any]) -> dict[str, Any]:
    """A Python dict as a DynamoDB item, leaving out None values."""
    return {name: to_attribute(value) for name, value in values.items() if value is not None}


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    """A DynamoDB item as a plain dict (numbers as int or float)."""
    return {name: _plain(_deserializer.deserialize(value)) for name, value in item.items()}


def is_condition_failure(error: Exception) -> bool:
    """True for a botocore ClientError raised because a ConditionExpression failed."""
    response = getattr(error, "response", None) or {}
    return response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def put_if_absent(client: Any, table_name: str, item: dict[str, Any], key_attribute: str) -> bool:
    """Write `item` (a DynamoDB item) only if no row with its key exists.

    `key_attribute` is an attribute of the table's key (every row has it). Returns False, writing
    nothing, when the row exists already; other errors are raised.
    """
    try:
        client.put_item(TableName=table_name, Item=item, ConditionExpression=f"attribute_not_exists({key_attribute})")
    except ClientError as error:
        if is_condition_failure(error):
            return False
        raise
    return True


def update_expression(
    values: dict[str, Any], remove: tuple[str, ...] = ()
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """An UpdateExpression that sets `values` and removes the attributes `remove`.

    Returns (expression, ExpressionAttributeNames, placeholder values): attribute names are
    `#f<i>` and values `:v<i>`, in order; the placeholder values are plain Python values, for
    `to_item` once the caller has added its own condition values.
    """
    names = {f"#f{index}": name for index, name in enumerate([*values, *remove])}
    expression = "SET " + ", ".join(f"#f{index} = :v{index}" for index in range(len(values)))
    if remove:
        expression += " REMOVE " + ", ".join(f"#f{len(values) + index}" for index in range(len(remove)))
    return expression, names, {f":v{index}": value for index, value in enumerate(values.values())}


def utc_now() -> str:
    """The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _decimals(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {key: _decimals(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_decimals(item) for item in value]
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, set)):
        return [_plain(item) for item in value]
    return value
