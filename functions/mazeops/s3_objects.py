"""Size-limited S3 reads and existence checks for the small documents the handlers read."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


class ObjectMissing(LookupError):
    """The object does not exist."""


class ObjectTooLarge(ValueError):
    """The object is larger than the reader accepts."""


def object_size(s3: Any, bucket: str, key: str) -> int | None:
    """Size in bytes of `s3://bucket/key`, or None if it does not exist."""
    try:
        return s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
    except ClientError as error:
        if error.response["Error"]["Code"] in _MISSING_CODES:
            return None
        raise


def read_limited(s3: Any, bucket: str, key: str, max_bytes: int) -> bytes:
    """The object's bytes; HEAD first so an oversized object is refused without being read.

    Raises ObjectMissing or ObjectTooLarge. The GET asks for at most `max_bytes + 1` bytes, so an
    object replaced by a larger one between HEAD and GET is still refused.
    """
    size = object_size(s3, bucket, key)
    if size is None:
        raise ObjectMissing(f"s3://{bucket}/{key} does not exist")
    if size > max_bytes:
        raise ObjectTooLarge(f"s3://{bucket}/{key} is {size} bytes; the limit is {max_bytes}")
    if size == 0:
        return b""
    try:
        body = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{max_bytes}")["Body"].read()
    except ClientError as error:
        if error.response["Error"]["Code"] in _MISSING_CODES:
            raise ObjectMissing(f"s3://{bucket}/{key} does not exist") from None
        raise
    if len(body) > max_bytes:
        raise ObjectTooLarge(f"s3://{bucket}/{key} grew beyond the limit of {max_bytes} bytes while being read")
    return body
