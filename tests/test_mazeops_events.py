"""EventBridge event parsing: the three event kinds the handlers receive, and malformed ones."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest
from mazeops_testing import BUCKET, execution_status_change_event, s3_object_created_event, scheduled_event

from mazeops.events import (
    S3_OBJECT_CREATED,
    InvalidEvent,
    event_kind,
    parse_execution_status_change,
    parse_s3_object_created,
    parse_scheduled_event,
)


def test_s3_object_created() -> None:
    parsed = parse_s3_object_created(s3_object_created_event("requests/run1.json", etag="abc", size=42))
    assert (parsed.bucket, parsed.key, parsed.etag, parsed.size) == (BUCKET, "requests/run1.json", "abc", 42)
    assert event_kind(s3_object_created_event("k")) == S3_OBJECT_CREATED


def test_s3_keys_are_url_decoded() -> None:
    assert parse_s3_object_created(s3_object_created_event("requests/my+run%2F..json")).key == "requests/my run/..json"


def test_s3_event_without_etag_has_an_empty_etag() -> None:
    event = s3_object_created_event("k")
    del event["detail"]["object"]["etag"]
    assert parse_s3_object_created(event).etag == ""


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda e: e["detail"].pop("bucket"), "lacks a field"),
        (lambda e: e["detail"]["object"].pop("key"), "lacks a field"),
        (lambda e: e.__setitem__("detail", "oops"), "lacks a field"),
        (lambda e: e["detail"]["object"].__setitem__("size", "big"), "non-integer size"),
        (lambda e: e["detail"]["bucket"].__setitem__("name", ""), "no valid 'bucket'"),
        (lambda e: e.__setitem__("detail-type", "Object Deleted"), "expected a 'Object Created'"),
    ],
)
def test_malformed_s3_events(mutate, message: str) -> None:
    event = copy.deepcopy(s3_object_created_event("requests/run1.json"))
    mutate(event)
    with pytest.raises(InvalidEvent, match=message):
        parse_s3_object_created(event)


@pytest.mark.parametrize("event", [None, [], "text", {"detail": {}}, {"source": "aws.s3"}])
def test_non_eventbridge_inputs(event: object) -> None:
    with pytest.raises(InvalidEvent):
        event_kind(event)


def test_scheduled_event() -> None:
    parsed = parse_scheduled_event(scheduled_event("2026-12-02T03:00:00Z", rule="nightly"))
    assert parsed.rule_arn.endswith(":rule/nightly")
    assert parsed.time == datetime(2026, 12, 2, 3, 0, tzinfo=UTC)


@pytest.mark.parametrize("time", ["yesterday", 1796227200, None])
def test_scheduled_event_with_a_bad_time(time: object) -> None:
    event = scheduled_event()
    event["time"] = time
    with pytest.raises(InvalidEvent, match="time"):
        parse_scheduled_event(event)


def test_scheduled_event_without_resources() -> None:
    event = scheduled_event()
    event["resources"] = []
    with pytest.raises(InvalidEvent, match="rule_arn"):
        parse_scheduled_event(event)


def test_execution_status_change() -> None:
    parsed = parse_execution_status_change(execution_status_change_event("train-run1", "TIMED_OUT"))
    assert (parsed.name, parsed.status, parsed.stop_date) == ("train-run1", "TIMED_OUT", 1796230800000)
    assert parsed.execution_arn.endswith(":execution:maze-training:train-run1")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("name"), "'name'"),
        (lambda d: d.__setitem__("status", 3), "'status'"),
        (lambda d: d.__setitem__("stopDate", "late"), "stopDate"),
    ],
)
def test_malformed_execution_status_change(mutate, message: str) -> None:
    event = execution_status_change_event("train-run1")
    mutate(event["detail"])
    with pytest.raises(InvalidEvent, match=message):
        parse_execution_status_change(event)


def test_wrong_kind_for_the_parser() -> None:
    with pytest.raises(InvalidEvent, match="Scheduled Event"):
        parse_scheduled_event(s3_object_created_event("k"))
