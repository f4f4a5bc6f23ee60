"""LocalStack end to end on the fixture SAM template (tests/fixtures/mini_stack).

S3 upload -> EventBridge -> router Lambda (real code) -> StartExecution -> ASL with a Lambda
task (Retry / Catch on exception class names) -> status change event -> Lambda; an
EventBridge rule with a Step Functions target and an InputTransformer; schedules fired on demand.
"""

import json
import time
from pathlib import Path

import pytest

from local_stack.schedules import ScheduleError, fire_scheduled_rule
from local_stack.stack import NO_HEAD_RAY_TOKEN, LocalStack, LocalStackConfig
from tests.mazeops_testing import log_messages

MINI_STACK = Path(__file__).parent / "fixtures" / "mini_stack"
REQUESTS = {
    "in/run-ok.json": {"mode": "ok"},
    "in/run-flaky.json": {"mode": "flaky"},
    "in/run-reject.json": {"mode": "reject"},
    "in/run-down.json": {"mode": "down"},
    "other/ignored.json": {"mode": "ok"},
    "direct/x.json": {},
}


def wait_for(probe, timeout_s: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    config = LocalStackConfig(
        template_path=MINI_STACK / "template.yaml",
        state_dir=tmp_path_factory.mktemp("local-stack"),
        parameters={"Greeting": "bonjour"},
        stack_name="mini",
    )
    with LocalStack(config) as running:
        yield running


@pytest.fixture(scope="module")
def uploaded(stack):
    """Upload every request at once (their executions overlap); returns the upload time."""
    s3 = stack.session.client("s3")
    started = time.monotonic()
    for key, body in REQUESTS.items():
        s3.put_object(Bucket=stack.outputs["BucketName"], Key=key, Body=json.dumps(body))
    return started


@pytest.fixture(scope="module")
def table(stack):
    return stack.session.resource("dynamodb").Table(stack.outputs["TableName"])


@pytest.fixture(scope="module")
def sfn(stack):
    return stack.session.client("stepfunctions")


def item(table, pk: str) -> dict | None:
    return table.get_item(Key={"pk": pk}).get("Item")


def finished_execution(stack, sfn, name: str, timeout_s: float = 60.0) -> dict:
    arn = stack.outputs["StateMachineArn"].replace(":stateMachine:", ":execution:") + f":{name}"

    def probe():
        try:
            described = sfn.describe_execution(executionArn=arn)
        except sfn.exceptions.ExecutionDoesNotExist:
            return None
        return described if described["status"] != "RUNNING" else None

    return wait_for(probe, timeout_s, f"execution {name}")


def test_start_deploys_the_template_and_writes_stack_json(stack, sfn):
    state = json.loads((Path(stack.config.state_dir) / "stack.json").read_text())

    assert state == {
        "endpoint_url": stack.endpoint_url,
        "region": "us-east-1",
        "stack_name": "mini",
        "outputs": stack.outputs,
        "ray_address": None,
        "serve_url": None,
    }
    assert set(stack.outputs) == {
        "BucketName",
        "TableName",
        "StateMachineArn",
        "RouterFunctionName",
        "WorkerFunctionName",
        "RayAuthTokenSecretArn",
    }
    definition = sfn.describe_state_machine(stateMachineArn=stack.outputs["StateMachineArn"])["definition"]
    assert "${" not in definition
    assert f"function:{stack.outputs['WorkerFunctionName']}" in definition
    print(f"local stack start: {stack.timings}")


def test_the_ray_token_secret_is_created_by_cloudformation_and_filled_after_deploying(stack):
    """moto's CloudFormation skips secrets; the local stack creates them and, without a head, fills in a token that
    no head knows (so the functions' Ray calls fail as they would against the wrong cluster, never unauthenticated)."""
    arn = stack.outputs["RayAuthTokenSecretArn"]
    assert arn.startswith("arn:aws:secretsmanager:us-east-1:") and stack.physical_id("RayAuthTokenSecret") == arn
    secrets = stack.session.client("secretsmanager")
    assert secrets.get_secret_value(SecretId=arn)["SecretString"] == NO_HEAD_RAY_TOKEN
    assert secrets.describe_secret(SecretId=arn)["Description"] == "Ray auth token of the mini stack"


def test_an_upload_runs_the_router_with_its_environment(stack, table, uploaded):
    routed = wait_for(lambda: item(table, "routed#in/run-ok.json"), what="the router's record")

    assert routed["greeting"] == "bonjour"
    assert routed["function_name"] == stack.outputs["RouterFunctionName"]
    assert routed["region"] == "us-east-1"
    assert time.strptime(routed["event_time"], "%Y-%m-%dT%H:%M:%SZ")
    head = stack.session.client("s3").head_object(Bucket=stack.outputs["BucketName"], Key="in/run-ok.json")
    assert routed["etag"] == head["ETag"].strip('"')  # S3's EventBridge events name it `etag`
    group = f"/aws/lambda/{stack.outputs['RouterFunctionName']}"
    routing = wait_for(
        lambda: [line for line in log_messages(stack.session, group) if line.endswith("\trouting in/run-ok.json")],
        what="the router's log line",
    )
    assert all(message.startswith("[WARNING]") for message in routing)


def test_the_execution_succeeds(stack, sfn, uploaded):
    execution = finished_execution(stack, sfn, "run-ok")

    assert execution["status"] == "SUCCEEDED"
    output = json.loads(execution["output"])
    assert output["work"]["result"] == {"attempt": 1.0, "mode": "ok", "greeting": "bonjour"}
    print(f"S3 upload -> execution SUCCEEDED: {time.monotonic() - uploaded:.2f} s (first of 6 uploads)")


def test_retry_matches_the_exception_class_name(stack, sfn, uploaded):
    execution = finished_execution(stack, sfn, "run-flaky")

    assert execution["status"] == "SUCCEEDED"
    assert json.loads(execution["output"])["work"]["result"]["attempt"] == 2.0


def test_catch_matches_the_exception_class_name(stack, sfn, table, uploaded):
    execution = finished_execution(stack, sfn, "run-reject")

    assert (execution["status"], execution["error"]) == ("FAILED", "InvalidRunSpec")
    rejected = wait_for(lambda: item(table, "rejected#run-reject"), what="the Catch branch's record")
    cause = json.loads(rejected["cause"])
    assert cause["errorType"] == "InvalidRunSpec"
    assert cause["errorMessage"] == "mode 'reject' is not allowed"
    assert item(table, "attempts#run-reject")["attempts"] == 1


def test_exhausted_retries_fail_with_the_error_name(stack, sfn, table, uploaded):
    execution = finished_execution(stack, sfn, "run-down")

    assert (execution["status"], execution["error"]) == ("FAILED", "RayUnavailable")
    assert item(table, "attempts#run-down")["attempts"] == 3


def test_a_step_functions_target_gets_the_transformed_input(stack, sfn, uploaded):
    def direct_execution():
        for listed in sfn.list_executions(stateMachineArn=stack.outputs["StateMachineArn"])["executions"]:
            described = sfn.describe_execution(executionArn=listed["executionArn"])
            if json.loads(described["input"]).get("key") == "direct/x.json" and described["status"] != "RUNNING":
                return described
        return None

    execution = wait_for(direct_execution, what="the execution started by EventBridge")

    assert json.loads(execution["input"]) == {"key": "direct/x.json", "mode": "ok", "note": "from direct/x.json"}
    assert execution["status"] == "SUCCEEDED"


def status_events(table, execution_name: str) -> list[dict]:
    return [
        row
        for row in table.scan()["Items"]
        if row.get("detail_type") == "Step Functions Execution Status Change"
        and row["execution_name"] == execution_name
    ]


def test_ended_executions_fire_the_status_change_rule(stack, sfn, table, uploaded):
    finished_execution(stack, sfn, "run-reject")
    finished_execution(stack, sfn, "run-ok")

    [failed] = wait_for(lambda: status_events(table, "run-reject"), what="the FAILED status event")
    [succeeded] = wait_for(lambda: status_events(table, "run-ok"), what="the SUCCEEDED status event")

    assert (failed["status"], failed["error"], failed["source"]) == ("FAILED", "InvalidRunSpec", "aws.states")
    assert (succeeded["status"], succeeded["error"]) == ("SUCCEEDED", "-")


def test_stopping_an_execution_fires_the_status_change_rule(stack, sfn, table):
    arn = sfn.start_execution(
        stateMachineArn=stack.outputs["StateMachineArn"], name="pause-me", input=json.dumps({"pause_seconds": 300})
    )["executionArn"]
    wait_for(
        lambda: any(e["type"] == "WaitStateEntered" for e in sfn.get_execution_history(executionArn=arn)["events"]),
        what="the Wait state",
    )

    sfn.stop_execution(executionArn=arn)

    assert finished_execution(stack, sfn, "pause-me", timeout_s=10)["status"] == "ABORTED"
    [aborted] = wait_for(lambda: status_events(table, "pause-me"), what="the ABORTED status event")
    assert aborted["status"] == "ABORTED"


def test_schedules_fire_only_on_demand(stack, sfn, table, uploaded):
    events = stack.session.client("events")
    nightly = stack.physical_id("RecordEventFunctionNightly")
    hourly = stack.physical_id("RecordEventFunctionHourly")
    finished_execution(stack, sfn, "run-ok")
    assert item(table, "event#nightly") is None  # six S3 events and status changes did not trigger it

    fire_scheduled_rule(events, nightly)
    recorded = wait_for(lambda: item(table, "event#nightly"), what="the schedule's target")
    assert (recorded["source"], recorded["detail_type"]) == ("nightly-schedule", "Scheduled Event")

    with pytest.raises(ScheduleError, match="is DISABLED"):
        fire_scheduled_rule(events, hourly)
    event = fire_scheduled_rule(events, hourly, include_disabled=True)
    recorded = wait_for(lambda: item(table, f"event#{event['id']}"), what="the disabled schedule's target")
    assert (recorded["source"], recorded["detail_type"]) == ("aws.events", "Scheduled Event")


@pytest.mark.parametrize(
    ("rule", "message"),
    [("RouterFunctionObjectCreated", "has no ScheduleExpression"), (None, "no EventBridge rule named")],
)
def test_firing_a_rule_that_is_not_a_schedule_is_refused(stack, rule, message):
    name = stack.physical_id(rule) if rule else "no-such-rule"

    with pytest.raises(ScheduleError, match=message):
        fire_scheduled_rule(stack.session.client("events"), name)


def test_events_outside_a_rule_pattern_are_not_delivered(stack, sfn, table, uploaded):
    finished_execution(stack, sfn, "run-down")  # the last of the uploads to settle

    assert item(table, "routed#other/ignored.json") is None
    assert item(table, "routed#direct/x.json") is None


def test_a_ticker_fires_a_schedule_rule_until_stopped(stack, table, uploaded):
    finished_execution(stack, stack.session.client("stepfunctions"), "run-ok")  # what the schedule test waits for

    ticker = stack.start_ticker("RecordEventFunctionNightly", interval_s=0.5)
    try:
        wait_for(lambda: ticker.fired >= 3, what="three firings")
        recorded = wait_for(lambda: item(table, "event#nightly"), what="the schedule's target")
    finally:
        ticker.stop()
        stack.tickers.remove(ticker)
    fired = ticker.fired
    time.sleep(1.5)

    assert (recorded["source"], recorded["detail_type"]) == ("nightly-schedule", "Scheduled Event")
    assert ticker.fired == fired  # stopped
    table.delete_item(Key={"pk": "event#nightly"})  # as before, for a rerun of the on-demand test


@pytest.mark.parametrize("interval_s", [0, -1.0])
def test_a_ticker_needs_a_positive_interval(stack, interval_s):
    with pytest.raises(ScheduleError, match="interval must be positive"):
        stack.start_ticker("RecordEventFunctionNightly", interval_s)
