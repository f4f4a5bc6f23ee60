"""Watch the Ray cluster on a schedule: its head's health, the stall and spend guards of running runs, and
evaluations to start again after an infrastructure failure.

Each run pings the Ray head, records the outcome in the runs table's health row (mazeops.cluster_health), emits the
metric RayHeadUnreachable (1 or 0) and notifies the topic once an outage has lasted CLUSTER_UNREACHABLE_MINUTES, and
once more when the head answers again. While the head answers, it stops each RUNNING run whose Ray job is RUNNING
and whose stall or spend guard fires (mazeops.guards, mazeops.run_stop), then starts again the evaluations that
failed for an infrastructure reason once their backoff has passed (mazeops.eval_retry, mazeops.reevaluation).
Each run is the next one's retry: a step that fails for one run or adapter is logged and tried again 5 minutes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.aws_clients import aws_client
from mazeops.cluster_health import (
    ClusterHealth,
    Notice,
    format_time,
    next_health,
    outage_minutes,
    parse_time,
    read_health,
    write_health,
)
from mazeops.config import Config, load
from mazeops.eval_retry import due_retries
from mazeops.failures import one_line, one_line_errors
from mazeops.guards import GuardVerdict, guard_settings, spend_verdict, stall_verdict
from mazeops.layout import parse_manifest_key, run_prefix
from mazeops.names import InvalidName, training_job_id
from mazeops.ray_jobs import RayJobError, RayJobNotFound, RayJobsClient, RayUnavailable
from mazeops.ray_token import ray_jobs_client
from mazeops.reevaluation import start_reevaluation
from mazeops.registry import Registry
from mazeops.run_stop import stop_run
from mazeops.runs import RunRecord, RunsTable

UNREACHABLE_SUBJECT = "maze-rl-ops: Ray cluster unreachable"
RECOVERED_SUBJECT = "maze-rl-ops: Ray cluster answers again"
METRIC_NAME = "RayHeadUnreachable"

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace="MazeRlOps")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Watch the cluster once (a scheduled event; its content is not used); contract in docs/design.md."""
    summary = watch(
        load(),
        aws_client("dynamodb"),
        aws_client("s3"),
        aws_client("stepfunctions"),
        aws_client("sns"),
        datetime.now(UTC),
    )
    metrics.add_metric(name=METRIC_NAME, unit=MetricUnit.Count, value=0 if summary["reachable"] else 1)
    for stopped in summary["stopped"]:
        with single_metric(name="RunsStoppedByGuard", unit=MetricUnit.Count, value=1, namespace="MazeRlOps") as metric:
            metric.add_dimension(name="guard", value=stopped["guard"])
    logger.info("Cluster watch done", extra={"summary": summary})
    return summary


def watch(config: Config, dynamodb: Any, s3: Any, sfn: Any, sns: Any, now: datetime) -> dict[str, Any]:
    """One watch at `now`: check the head, record its health and notify; then guard the runs and retry evaluations.

    Returns {"reachable", "notice" ("unreachable", "recovered" or None), "stopped": [{"run_id", "guard"}],
    "retried": [evaluation execution names]}.
    """
    runs_table = config.required("runs_table")
    address = config.required("ray_address")
    ray, error = ping(address)
    previous = read_health(dynamodb, runs_table)
    health, notice = next_health(previous, ray is not None, error, now, config.cluster_unreachable_minutes)
    runs = RunsTable(dynamodb, runs_table)
    if notice is not None:
        outage = health if notice == "unreachable" else previous
        assert outage is not None  # "recovered" follows an outage of `previous`
        notify(sns, config, notice, outage, runs.active_run_ids(), now)
    # Written after the notice went out: a failed publish leaves the notice due, and the next run sends it.
    write_health(dynamodb, runs_table, health)
    logger.info("Ray head checked", extra={"reachable": health.reachable, "notice": notice, "error": health.error})
    summary: dict[str, Any] = {"reachable": health.reachable, "notice": notice, "stopped": [], "retried": []}
    if ray is None:
        return summary
    summary["stopped"] = guard_runs(runs, ray, s3, sfn, config.required("artifacts_bucket"), now)
    summary["retried"] = retry_evaluations(config, Registry(dynamodb, config.required("registry_table")), sfn, now)
    return summary


def ping(address: str) -> tuple[RayJobsClient | None, str | None]:
    """(a client of the head at `address`, None) if it answers its version, else (None, why in one line)."""
    try:
        client = ray_jobs_client(address)
        client.version()
    except (RayUnavailable, RayJobError, RayJobNotFound) as failure:  # 404: not a Ray dashboard
        return None, one_line(str(failure))
    return client, None


def notify(
    sns: Any, config: Config, notice: Notice, outage: ClusterHealth, active_run_ids: Sequence[str], now: datetime
) -> None:
    """Publish `notice` about the outage `outage` (the health that holds its start) to the topic."""
    since = outage.unreachable_since
    minutes = f"{outage_minutes(outage, now):.0f} minutes"
    runs = ", ".join(active_run_ids) or "none"
    retries = (
        f"up to {config.eval_retry_max_attempts} attempts in all, the first retry "
        f"{config.eval_retry_backoff_seconds:g} s after the failure, each later one twice as long"
    )
    if notice == "unreachable":
        subject = UNREACHABLE_SUBJECT
        message = (
            f"The Ray head at {config.ray_address} has not answered since {since} ({minutes}; the threshold is "
            f"{config.cluster_unreachable_minutes:g} minutes): {outage.error or 'no answer'}.\n"
            f"Active runs (RUNNING or SUBMITTED): {runs}.\n"
            "Meanwhile: training executions keep polling their Ray jobs and their runs stay as they are (an outage "
            "stops no run); the stall and spend guards wait for the head; an adapter uploaded now fails its "
            f"evaluation at submit, and that evaluation starts again on its own once the head answers ({retries}).\n"
            "A second notification follows when the head answers again."
        )
    else:
        subject = RECOVERED_SUBJECT
        message = (
            f"The Ray head at {config.ray_address} answers again at {format_time(now)}, after being unreachable "
            f"since {since} ({minutes}).\n"
            f"Active runs (RUNNING or SUBMITTED): {runs}; check each with: mazeops-ops run show <run_id>.\n"
            "Evaluations that failed during the outage for an infrastructure reason start again on their own "
            f"({retries}); any adapter's evaluation runs again with: mazeops-ops adapters evaluate <base> <adapter>."
        )
    sns.publish(TopicArn=config.required("topic_arn"), Subject=subject, Message=message)
    logger.warning("Cluster notice published", extra={"notice": notice, "unreachable_since": since})


def guard_runs(
    runs: RunsTable, ray: RayJobsClient, s3: Any, sfn: Any, bucket: str, now: datetime
) -> list[dict[str, str]]:
    """Stop each active run whose stall or spend guard fires at `now`; [{"run_id", "guard"}] of those stopped."""
    stopped: list[dict[str, str]] = []
    for run_id in runs.active_run_ids():
        try:
            verdict = run_verdict(runs.get_run(run_id), ray, s3, bucket, now)
            if verdict is not None and stop_run(runs, sfn, run_id, verdict):
                stopped.append({"run_id": run_id, "guard": verdict.guard})
        except Exception:  # one run's failure (its job gone with a restarted head, say) spares the others
            logger.exception("Guard check of a run failed; the next watch tries again", extra={"run_id": run_id})
    return stopped


def run_verdict(run: RunRecord | None, ray: RayJobsClient, s3: Any, bucket: str, now: datetime) -> GuardVerdict | None:
    """The stall or spend verdict on `run` at `now`, or None.

    Only a RUNNING run with guard settings and a `running_at`, whose Ray training job is RUNNING, is judged. The stall
    guard counts from the newest adapter manifest's upload (else from running_at); the spend guard needs the run's
    GPU count.
    """
    if run is None or run.status != "RUNNING" or run.running_at is None:
        return None
    settings = guard_settings(run.guard)
    if settings is None or (settings.stall_minutes is None and settings.gpu_hours is None):
        return None
    job = ray.get(training_job_id(run.run_id))
    if job.status != "RUNNING":
        logger.info("Run's Ray job is not RUNNING; not guarded now", extra={"run_id": run.run_id, "job": job.status})
        return None
    running_at = parse_time(run.running_at)
    last_at, last_step = last_adapter(s3, bucket, run.run_id)
    verdict = stall_verdict(now, running_at, last_at, last_step, settings.stall_minutes)
    if verdict is None and run.num_gpus:
        verdict = spend_verdict(now, running_at, run.num_gpus, settings.gpu_hours)
    return verdict


def last_adapter(s3: Any, bucket: str, run_id: str) -> tuple[datetime | None, int | None]:
    """(upload time, step) of the run's newest adapter manifest in `bucket`; (None, None) if it has none."""
    newest: tuple[datetime, int] | None = None
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{run_prefix(run_id)}adapters/")
    for page in pages:
        for entry in page.get("Contents", []):
            try:
                _run_id, step = parse_manifest_key(entry["Key"])
            except InvalidName:
                continue  # an adapter file, not a manifest
            if newest is None or (entry["LastModified"], step) > newest:
                newest = (entry["LastModified"], step)
    return newest if newest is not None else (None, None)


def retry_evaluations(config: Config, registry: Registry, sfn: Any, now: datetime) -> list[str]:
    """Start again the evaluations due for a retry at `now` (mazeops.eval_retry); the started execution names."""
    state_machine = config.required("evaluation_state_machine_arn")
    bucket = config.required("artifacts_bucket")
    started: list[str] = []
    for base_model_id in sorted(config.base_models):
        records = registry.list_adapters(base_model_id)
        for record in due_retries(records, now, config.eval_retry_backoff_seconds, config.eval_retry_max_attempts):
            try:
                name, _arn = start_reevaluation(sfn, state_machine, bucket, record)
            except Exception:  # the adapter stays EVAL_FAILED: the next watch tries again
                logger.exception(
                    "Evaluation did not start again; the next watch tries again",
                    extra={"adapter_name": record.adapter_name, "error": record.error},
                )
                continue
            logger.info(
                "Evaluation started again after an infrastructure failure",
                extra={"adapter_name": record.adapter_name, "execution_name": name, "failed_with": record.error},
            )
            started.append(name)
    return started
