"""The Ray cluster's health as the cluster watch last saw it: one row of the runs table, `run_id = "#CLUSTER"`.

Each check of the Ray head goes through `next_health`, a pure transition that also says whether the check calls for
a notification: "unreachable" once per outage, when the head has not answered for the threshold, and "recovered"
when it answers again after an outage that was notified.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from mazeops.dynamo import from_item, to_attribute, to_item

# The runs table's key of the health row: '#' is no run id's first character (mazeops.names), so no run has it.
CLUSTER_HEALTH_KEY = "#CLUSTER"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MAX_ERROR_CHARS = 1000

Notice = Literal["unreachable", "recovered"]


class InvalidTime(ValueError):
    """A row's time text (or a check's time) is not an ISO 8601 time with a time zone."""


@dataclass(frozen=True)
class ClusterHealth:
    """The outcome of the last check of the Ray head.

    `unreachable_since` is the time of the first failed check of the current outage (None while the head answers);
    `notified_at` is when this outage's "unreachable" notification went out (None if it has not).
    """

    reachable: bool
    checked_at: str
    unreachable_since: str | None = None
    notified_at: str | None = None
    error: str | None = None


def format_time(moment: datetime) -> str:
    """`moment` (timezone-aware) as the rows' UTC time text `YYYY-MM-DDTHH:MM:SSZ`."""
    if moment.tzinfo is None:
        raise InvalidTime(f"time {moment.isoformat()} has no time zone")
    return moment.astimezone(UTC).strftime(TIME_FORMAT)


def parse_time(text: str) -> datetime:
    """A row's ISO 8601 time text (`...Z` or with an offset, fractions allowed) as an aware UTC datetime."""
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise InvalidTime(f"not an ISO 8601 time: {str(text)[:40]!r}") from None
    if moment.tzinfo is None:
        raise InvalidTime(f"time {text[:40]!r} has no time zone")
    return moment.astimezone(UTC)


def next_health(
    previous: ClusterHealth | None, reachable: bool, error: str | None, now: datetime, threshold_minutes: float
) -> tuple[ClusterHealth, Notice | None]:
    """The health after a check at `now` (reachable or not, with `error`), and the notification it calls for.

    An outage starts at its first failed check (`unreachable_since`) and lasts until a check succeeds. "unreachable"
    is answered once per outage: at the first failed check at least `threshold_minutes` after its start.
    "recovered" is answered at the successful check that ends an outage whose "unreachable" went out.
    """
    checked_at = format_time(now)
    outage = previous if previous is not None and not previous.reachable and previous.unreachable_since else None
    if reachable:
        recovered = outage is not None and outage.notified_at is not None
        return ClusterHealth(reachable=True, checked_at=checked_at), ("recovered" if recovered else None)
    since = outage.unreachable_since if outage is not None and outage.unreachable_since else checked_at
    notified_at = outage.notified_at if outage is not None else None
    notice: Notice | None = None
    if notified_at is None and now - parse_time(since) >= timedelta(minutes=threshold_minutes):
        notice, notified_at = "unreachable", checked_at
    health = ClusterHealth(
        reachable=False,
        checked_at=checked_at,
        unreachable_since=since,
        notified_at=notified_at,
        error=(error or "")[:MAX_ERROR_CHARS] or None,
    )
    return health, notice


def read_health(dynamodb_client: Any, runs_table: str) -> ClusterHealth | None:
    """The health row of the runs table `runs_table` (read consistently), or None before the first check."""
    answer = dynamodb_client.get_item(
        TableName=runs_table, Key={"run_id": to_attribute(CLUSTER_HEALTH_KEY)}, ConsistentRead=True
    )
    if "Item" not in answer:
        return None
    row = from_item(answer["Item"])
    return ClusterHealth(
        reachable=bool(row.get("reachable")),
        checked_at=str(row.get("checked_at") or ""),
        unreachable_since=row.get("unreachable_since"),
        notified_at=row.get("notified_at"),
        error=row.get("error"),
    )


def write_health(dynamodb_client: Any, runs_table: str, health: ClusterHealth) -> None:
    """Replace the health row of the runs table `runs_table` with `health` (absent fields are left out)."""
    item = to_item({"run_id": CLUSTER_HEALTH_KEY, **dataclasses.asdict(health)})
    dynamodb_client.put_item(TableName=runs_table, Item=item)


def outage_minutes(health: ClusterHealth, now: datetime) -> float:
    """Whole minutes since the start of `health`'s outage at `now` (0 when the head answers)."""
    if health.unreachable_since is None:
        return 0.0
    return max(0.0, (now - parse_time(health.unreachable_since)).total_seconds() // 60)
