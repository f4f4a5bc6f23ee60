"""Fire an EventBridge schedule rule on demand: locally no ticker runs, so a rule's ``rate(...)``/``cron(...)``
never fires by itself; `fire_scheduled_rule` delivers one "Scheduled Event" to its targets now."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from local_stack import moto_patches


class ScheduleError(ValueError):
    """The rule does not exist, has no schedule, or is disabled."""


def fire_scheduled_rule(events_client: Any, rule_name: str, include_disabled: bool = False) -> dict[str, Any]:
    """Deliver one "Scheduled Event" for default-bus rule `rule_name`; returns the event sent."""
    try:
        rule = events_client.describe_rule(Name=rule_name)
    except events_client.exceptions.ResourceNotFoundException as exc:
        raise ScheduleError(f"no EventBridge rule named {rule_name!r} on the default bus") from exc
    if not rule.get("ScheduleExpression"):
        raise ScheduleError(f"rule {rule_name!r} has no ScheduleExpression")
    if rule["State"] != "ENABLED" and not include_disabled:
        raise ScheduleError(f"rule {rule_name!r} is {rule['State']}; pass include_disabled=True to fire it anyway")
    _, _, _, region, account_id, _ = rule["Arn"].split(":", 5)
    event = {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account_id,
        "time": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule["Arn"]],
        "detail": {},
    }
    moto_patches.deliver_to_rule_targets(account_id, region, rule_name, event)
    return event
