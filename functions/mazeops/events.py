"""The EventBridge events the handlers receive, read through Powertools' event data classes.

Anything unexpected raises InvalidEvent with the reason, never a KeyError.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, S3EventBridgeNotificationEvent

S3_OBJECT_CREATED = ("aws.s3", "Object Created")
SCHEDULED_EVENT = ("aws.events", "Scheduled Event")
EXECUTION_STATUS_CHANGE = ("aws.states", "Step Functions Execution Status Change")


class InvalidEvent(ValueError):
    """The event is not one this handler accepts, or lacks a field it needs."""


@dataclass(frozen=True)
class S3ObjectCreated:
    """An object was created in a bucket."""

    bucket: str
    key: str
    etag: str
    size: int | None


@dataclass(frozen=True)
class ScheduledEvent:
    """A schedule rule fired."""

    rule_arn: str
    time: datetime


@dataclass(frozen=True)
class ExecutionStatusChange:
    """A Step Functions execution changed status."""

    execution_arn: str
    state_machine_arn: str
    name: str
    status: str
    stop_date: int | None


def event_kind(event: Any) -> tuple[str, str]:
    """(source, detail-type) of an EventBridge event."""
    if not isinstance(event, dict):
        raise InvalidEvent(f"event must be a JSON object, got {type(event).__name__}")
    source, detail_type = event.get("source"), event.get("detail-type")
    if not isinstance(source, str) or not isinstance(detail_type, str):
        raise InvalidEvent("event has no 'source' and 'detail-type': not an EventBridge event")
    return source, detail_type


def parse_s3_object_created(event: Any) -> S3ObjectCreated:
    """Read an S3 Object Created event."""
    _expect(event, S3_OBJECT_CREATED)
    wrapped = S3EventBridgeNotificationEvent(event)
    try:
        detail = wrapped.detail
        parsed = S3ObjectCreated(
            bucket=detail.bucket.name,
            key=detail.object.key,
            etag=detail.object.etag,
            size=detail.object.size,
        )
    except (KeyError, TypeError, AttributeError) as error:
        raise InvalidEvent(f"S3 Object Created event lacks a field: {error}") from None
    _require_strings("S3 Object Created", bucket=parsed.bucket, key=parsed.key)
    if not isinstance(parsed.etag, str):
        raise InvalidEvent(f"S3 Object Created event has a non-string etag {parsed.etag!r}")
    if parsed.size is not None and (isinstance(parsed.size, bool) or not isinstance(parsed.size, int)):
        raise InvalidEvent(f"S3 Object Created event has a non-integer size {parsed.size!r}")
    return parsed


def parse_scheduled_event(event: Any) -> ScheduledEvent:
    """Read a Scheduled Event (the rule ARN is its first resource)."""
    _expect(event, SCHEDULED_EVENT)
    wrapped = EventBridgeEvent(event)
    try:
        resources = wrapped.resources
        parsed = ScheduledEvent(rule_arn=resources[0] if resources else "", time=_time(wrapped.time))
    except (KeyError, TypeError, IndexError) as error:
        raise InvalidEvent(f"Scheduled Event lacks a field: {error}") from None
    _require_strings("Scheduled Event", rule_arn=parsed.rule_arn)
    return parsed


def parse_execution_status_change(event: Any) -> ExecutionStatusChange:
    """Read a Step Functions Execution Status Change event."""
    _expect(event, EXECUTION_STATUS_CHANGE)
    detail = EventBridgeEvent(event).get("detail")
    if not isinstance(detail, dict):
        raise InvalidEvent("Step Functions Execution Status Change event has no detail object")
    parsed = ExecutionStatusChange(
        execution_arn=detail.get("executionArn"),
        state_machine_arn=detail.get("stateMachineArn"),
        name=detail.get("name"),
        status=detail.get("status"),
        stop_date=detail.get("stopDate"),
    )
    _require_strings(
        "Step Functions Execution Status Change",
        executionArn=parsed.execution_arn,
        stateMachineArn=parsed.state_machine_arn,
        name=parsed.name,
        status=parsed.status,
    )
    if parsed.stop_date is not None and (isinstance(parsed.stop_date, bool) or not isinstance(parsed.stop_date, int)):
        raise InvalidEvent(
            f"Step Functions Execution Status Change event has a non-integer stopDate {parsed.stop_date!r}"
        )
    return parsed


def _expect(event: Any, kind: tuple[str, str]) -> None:
    if event_kind(event) != kind:
        raise InvalidEvent(f"expected a {kind[1]!r} event from {kind[0]!r}, got {event_kind(event)}")


def _time(raw: Any) -> datetime:
    if not isinstance(raw, str):
        raise InvalidEvent(f"event time must be an ISO 8601 string, got {raw!r}")
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidEvent(f"event time {raw[:40]!r} is not ISO 8601") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _require_strings(kind: str, **fields: Any) -> None:
    for name, value in fields.items():
        if not isinstance(value, str) or not value:
            raise InvalidEvent(f"{kind} event has no valid {name!r} (got {str(value)[:80]!r})")
