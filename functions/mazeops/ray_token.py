"""The Ray cluster's auth token, read at run time from the stack's secret (RAY_AUTH_TOKEN_SECRET_ARN).

The token lives in Secrets Manager, not in the function environment, so the operator rotates it with
`put-secret-value` and no stack update; a value is cached for `TOKEN_MAX_AGE_S` per execution environment.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from aws_lambda_powertools.utilities.parameters import SecretsProvider
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
from botocore.exceptions import ClientError

from mazeops.aws_clients import aws_client
from mazeops.ray_jobs import MissingRayAuthToken, RayJobsClient, RayUnavailable, authenticated_client

SECRET_ARN_VARIABLE = "RAY_AUTH_TOKEN_SECRET_ARN"
# The stack output naming the same secret (template.yaml, RayAuthTokenSecret): where the ops CLI and the local stack
# find it.
SECRET_OUTPUT = "RayAuthTokenSecretArn"
# How long a read token is reused: a rotated token reaches every function within a minute.
TOKEN_MAX_AGE_S = 60
# GetSecretValue errors that retrying does not cure (Secrets Manager API reference, GetSecretValue, Errors);
# ResourceNotFoundException is also what a secret without a value answers, so it means "no token yet".
REFUSED_CODES = frozenset(
    {"AccessDeniedException", "DecryptionFailure", "InvalidParameterException", "InvalidRequestException"}
)


class RayTokenUnreadable(RuntimeError):
    """Secrets Manager refused to give the token's secret (denied, undecryptable, deleted): retrying will not help."""


def ray_auth_token(secret_arn: str | None = None, max_age_s: int = TOKEN_MAX_AGE_S) -> str:
    """The token in the secret `secret_arn` (default: $RAY_AUTH_TOKEN_SECRET_ARN), cached for `max_age_s`.

    Raises:
        MissingRayAuthToken: no secret is configured, or it holds no value or an empty one.
        RayTokenUnreadable: Secrets Manager refused the read (permissions, key, deleted secret).
        RayUnavailable: Secrets Manager could not answer now (throttled, failing, unreachable): retry later.
    """
    arn = os.environ.get(SECRET_ARN_VARIABLE, "") if secret_arn is None else secret_arn
    if not arn:
        raise MissingRayAuthToken(
            f"{SECRET_ARN_VARIABLE} is not set: the Ray Jobs API is only called with the cluster's token, "
            "kept in the stack's RayAuthTokenSecret (see docs/cluster.md)"
        )
    try:
        value = _provider(aws_client("secretsmanager")).get(arn, max_age=max_age_s)
    except GetParameterError as error:
        cause = error.__context__
        code = cause.response.get("Error", {}).get("Code") if isinstance(cause, ClientError) else None
        if code == "ResourceNotFoundException":
            raise MissingRayAuthToken(empty_secret_message(arn)) from None
        if code in REFUSED_CODES:
            raise RayTokenUnreadable(f"cannot read the Ray auth token from secret {arn}: {error}") from None
        # Throttling, a service error or no connection: retried like an unreachable head (RayUnavailable).
        raise RayUnavailable(f"cannot read the Ray auth token from secret {arn} now: {error}") from None
    token = value.decode() if isinstance(value, bytes) else str(value or "")
    if not token.strip():
        raise MissingRayAuthToken(empty_secret_message(arn))
    return token.strip()


def ray_jobs_client(address: str) -> RayJobsClient:
    """A Ray Jobs client of `address` authenticated with the token in the stack's secret (see `ray_auth_token`)."""
    return authenticated_client(address, ray_auth_token())


def clear_cache() -> None:
    """Forget every cached token (the next read goes to Secrets Manager)."""
    _provider.cache_clear()


@functools.cache
def _provider(client: Any) -> SecretsProvider:
    """One Powertools provider (and cache) per boto3 client, so the endpoint of the environment is honoured."""
    return SecretsProvider(boto3_client=client)


def empty_secret_message(arn: str) -> str:
    """Why the secret `arn` gives no token, and how an operator puts one there."""
    return (
        f"the Ray auth token secret {arn} holds no token (or does not exist): put the cluster's token into it "
        '(aws secretsmanager put-secret-value --secret-id <RayAuthTokenSecretArn> --secret-string "$TOKEN"; '
        "see docs/cluster.md); the Ray Jobs API is only called with it"
    )
