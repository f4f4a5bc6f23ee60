"""Fire an EventBridge schedule rule on demand: locally no rule's ``rate(...)``/``cron(...)`` fires by itself;
`fire_scheduled_rule` delivers one "Scheduled Event" to its targets now, and a `ScheduleTicker` does so every N
seconds in a daemon thread (the local stand-in for a schedule, at a local pace)."""

from __future__ import annotations

import datetime
import logging
import threading
import uuid
from typing import Any

from local_stack import moto_patches

logger = logging.getLogger(__name__)


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


class ScheduleTicker:
    """Fires one schedule rule every `interval_s` seconds in a daemon thread, from `start` until `stop`.

    The first event goes out one interval after `start`. A failed firing is logged and the next one is tried, as
    EventBridge keeps its schedule when a target fails; `fired` counts the events delivered.
    """

    def __init__(self, events_client: Any, rule_name: str, interval_s: float):
        if interval_s <= 0:
            raise ScheduleError(f"a ticker's interval must be positive, not {interval_s}")
        self.events_client = events_client
        self.rule_name = rule_name
        self.interval_s = interval_s
        self.fired = 0
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ScheduleTicker:
        """Start firing; returns self."""
        self._thread = threading.Thread(target=self._tick, name=f"ticker-{self.rule_name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop firing and wait for a firing in progress to end; safe to call twice."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _tick(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                fire_scheduled_rule(self.events_client, self.rule_name)
            except Exception:
                logger.exception("firing schedule rule %s failed", self.rule_name)
                continue
            self.fired += 1
