"""Powertools idempotency stores on the idempotency table, made once per execution environment."""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

from mazeops.aws_clients import aws_client


def idempotency_store(table_name: str, key_prefix: str) -> DynamoDBPersistenceLayer:
    """The store of the idempotent function `key_prefix` on `table_name`, reused while the DynamoDB client is.

    One store per function: a store keeps the IdempotencyConfig it was first used with. One per
    client: Powertools adds a request hook to the client for every store made on it.
    """
    return _store(table_name, key_prefix, aws_client("dynamodb"))


@functools.cache
def _store(table_name: str, key_prefix: str, client: Any) -> DynamoDBPersistenceLayer:
    return DynamoDBPersistenceLayer(table_name=table_name, boto3_client=client)
