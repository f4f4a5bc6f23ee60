"""`run start | list | show` and `executions` against a moto deployment."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from opsctl_testing import BASE, STACK, Deployment, cli, create_deployment

from mazeops.cluster_health import ClusterHealth, write_health
from mazeops.guards import EvalPoint, GuardVerdict, collapse_verdict, stall_verdict
from mazeops.runs import RunsTable
from mazeops.runspec import CollapseGuard, GuardSpec
from opsctl.runs import collapse_text

SPEC = {"base_model_id": BASE, "backend": "tiny", "total_steps": 4, "eval_interval": 2, "ckpt_interval": 2}
WAIT_THEN_PASS = {
    "StartAt": "WaitForJob",
    "States": {
        "WaitForJob": {"Type": "Wait", "Seconds": 1, "Next": "RecordRun"},
        "RecordRun": {"Type": "Pass", "End": True},
    },
}
FAILING = {
    "StartAt": "SubmitTrainingJob",
    "States": {"SubmitTrainingJob": {"Type": "Fail", "Error": "RayJobError", "Cause": "entrypoint failed"}},
}


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC))
    return path


def _request(deployment: Deployment, run_id: str) -> bytes:
    return deployment.s3.get_object(Bucket=deployment.bucket, Key=f"requests/{run_id}.json")["Body"].read()


def _no_requests(deployment: Deployment) -> bool:
    return deployment.s3.list_objects_v2(Bucket=deployment.bucket, Prefix="requests/")["KeyCount"] == 0


def test_start_uploads_the_validated_spec(deployment, spec_file, capsys):
    status, out, err = cli(capsys, "run", "start", str(spec_file), "--run-id", "r1")
    assert (status, err) == (0, "")
    assert f"s3://{deployment.bucket}/requests/r1.json" in out and "train-r1" in out
    assert _request(deployment, "r1") == spec_file.read_bytes()


def test_start_takes_the_run_id_from_run_name(deployment, tmp_path, capsys):
    path = tmp_path / "named.json"
    path.write_text(json.dumps({**SPEC, "run_name": "named-run"}))
    assert cli(capsys, "run", "start", str(path))[0] == 0
    assert json.loads(_request(deployment, "named-run"))["run_name"] == "named-run"


def test_start_refuses_to_overwrite_a_request(deployment, spec_file, tmp_path, capsys):
    assert cli(capsys, "run", "start", str(spec_file), "--run-id", "r1")[0] == 0
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**SPEC, "total_steps": 8}))
    status, out, err = cli(capsys, "run", "start", str(other), "--run-id", "r1")
    assert status == 2
    assert err.count("\n") == 1 and "already exists" in err and "requests/r1.json" in err
    assert _request(deployment, "r1") == spec_file.read_bytes()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({**SPEC, "totl_steps": 3}, "totl_steps"),
        ({**SPEC, "base_model_id": "llama-7b"}, "unknown base model 'llama-7b'; known: qwen3-vl-8b-sft"),
        ({**SPEC, "run_name": "someone-else"}, "differs from the key's run id"),
    ],
)
def test_start_refuses_an_invalid_spec_before_uploading(deployment, tmp_path, capsys, spec, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(spec))
    status, out, err = cli(capsys, "run", "start", str(path), "--run-id", "r1")
    assert status == 2 and message in err and err.startswith("mazeops-ops: error: ")
    assert _no_requests(deployment)


def test_start_refuses_a_bad_run_id_and_a_missing_file(deployment, spec_file, tmp_path, capsys):
    status, _, err = cli(capsys, "run", "start", str(spec_file), "--run-id", "../evil")
    assert status == 2 and "invalid run id" in err
    status, _, err = cli(capsys, "run", "start", str(tmp_path / "missing.json"), "--run-id", "r1")
    assert status == 2 and "cannot read" in err
    status, _, err = cli(capsys, "run", "start", str(spec_file))
    assert status == 2 and "pass --run-id" in err
    assert _no_requests(deployment)


def test_start_skips_the_base_model_check_when_the_stack_config_is_unreadable(deployment, tmp_path, capsys):
    function = boto3.client("cloudformation").describe_stack_resource(
        StackName=STACK, LogicalResourceId="ValidateRunSpecFunction"
    )
    boto3.client("lambda").delete_function(FunctionName=function["StackResourceDetail"]["PhysicalResourceId"])
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({**SPEC, "base_model_id": "llama-7b"}))
    status, out, err = cli(capsys, "run", "start", str(path), "--run-id", "r1")
    assert status == 0
    assert "base model is not checked" in out
    assert json.loads(_request(deployment, "r1"))["base_model_id"] == "llama-7b"


def _start_on_upload(deployment: Deployment, run_id: str) -> threading.Thread:
    """Start `train-<run_id>` once `requests/<run_id>.json` exists, as the EventBridge rule does."""

    def start_when_uploaded() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if deployment.s3.list_objects_v2(Bucket=deployment.bucket, Prefix=f"requests/{run_id}.json")["KeyCount"]:
                deployment.sfn.start_execution(
                    stateMachineArn=deployment.training_arn, name=f"train-{run_id}", input="{}"
                )
                return
            time.sleep(0.02)

    thread = threading.Thread(target=start_when_uploaded, daemon=True)
    thread.start()
    return thread


def test_start_wait_follows_the_training_execution_to_success(moto_executing_asl, fake_head, spec_file, capsys):
    deployment = create_deployment(fake_head, training_definition=WAIT_THEN_PASS)
    fake_head.jobs["train-r1"] = {"status": "RUNNING"}
    _start_on_upload(deployment, "r1")
    status, out, err = cli(
        capsys, "run", "start", str(spec_file), "--run-id", "r1", "--wait", "--interval", "0.05", "--progress", "0.3"
    )
    assert (status, err) == (0, "")
    lines = out.splitlines()
    entered = [line.split("] ", 1)[1] for line in lines if "entered" in line]
    assert entered == ["entered WaitForJob", "entered RecordRun"]
    assert any("job train-r1: RUNNING" in line for line in lines)
    assert any("still RUNNING, state WaitForJob, job RUNNING" in line for line in lines)
    assert lines[-1].endswith("execution train-r1 SUCCEEDED")


def test_start_wait_exits_1_when_the_execution_fails(moto_executing_asl, fake_head, spec_file, capsys):
    deployment = create_deployment(fake_head, training_definition=FAILING)
    _start_on_upload(deployment, "r1")
    status, out, _ = cli(capsys, "run", "start", str(spec_file), "--run-id", "r1", "--wait", "--interval", "0.05")
    assert status == 1
    assert "entered SubmitTrainingJob" in out
    assert "job train-r1: not submitted" in out
    assert out.splitlines()[-1].endswith("execution train-r1 FAILED: RayJobError entrypoint failed")


def test_start_wait_gives_up_after_the_timeout(deployment, spec_file, capsys):
    status, out, err = cli(
        capsys, "run", "start", str(spec_file), "--run-id", "r1", "--wait", "--interval", "0.05", "--timeout", "0.2"
    )
    assert status == 2
    assert "gave up" in err and "NOT STARTED" in err


def _seed_runs(deployment: Deployment) -> None:
    runs = RunsTable(boto3.client("dynamodb"), deployment.runs_table)
    runs.create_run("r1", "runs/r1/spec.json", "a" * 64, BASE, f"{deployment.training_arn}:train-r1")
    runs.create_run("r2", "runs/r2/spec.json", "b" * 64, BASE, f"{deployment.training_arn}:train-r2")
    runs.set_status("r1", "FAILED", error="RayJobError: entrypoint failed", job_id="train-r1")
    runs.set_status("r2", "RUNNING", job_id="train-r2")


def test_run_list_prints_every_run(deployment, capsys):
    _seed_runs(deployment)
    status, out, _ = cli(capsys, "run", "list")
    assert status == 0
    header, *rows = out.splitlines()
    assert header.split() == ["RUN_ID", "STATUS", "BASE_MODEL", "CREATED", "UPDATED", "ERROR"]
    assert sorted(row.split()[:3] for row in rows) == [["r1", "FAILED", BASE], ["r2", "RUNNING", BASE]]
    assert "RayJobError: entrypoint failed" in out
    status, out, _ = cli(capsys, "run", "list", "--json")
    assert {run["run_id"]: run["status"] for run in json.loads(out)} == {"r1": "FAILED", "r2": "RUNNING"}


def test_run_list_of_an_empty_table(deployment, capsys):
    assert cli(capsys, "run", "list")[1].splitlines()[1] == "(none)"


def _start_executions(deployment: Deployment) -> None:
    deployment.sfn.start_execution(stateMachineArn=deployment.training_arn, name="train-r1", input="{}")
    deployment.sfn.start_execution(stateMachineArn=deployment.evaluation_arn, name="eval-r1-step10", input="{}")
    deployment.sfn.start_execution(stateMachineArn=deployment.evaluation_arn, name="eval-r10-step1", input="{}")


def test_run_show_prints_row_executions_jobs_and_logs(deployment, capsys):
    _seed_runs(deployment)
    _start_executions(deployment)
    deployment.head.jobs["train-r1"] = {
        "status": "FAILED",
        "message": "exit code 1",
        "logs": "step 1\nTraceback: boom\n",
    }
    deployment.head.jobs["eval-r1-step10"] = {"status": "SUCCEEDED", "logs": "solve rate 0.5\n"}
    status, out, _ = cli(capsys, "run", "show", "r1", "--logs")
    assert status == 0
    assert "  status        FAILED" in out and "RayJobError: entrypoint failed" in out
    executions = out.split("\nexecutions\n")[1].split("\n\n")[0].splitlines()
    assert sorted(line.split()[:2] for line in executions[1:]) == [
        ["eval-r1-step10", "evaluation"],
        ["train-r1", "training"],
    ]
    jobs = out.split("\nray jobs\n")[1].split("\n\n")[0].splitlines()
    assert [line.split()[:2] for line in jobs[1:]] == [["train-r1", "FAILED"], ["eval-r1-step10", "SUCCEEDED"]]
    assert "logs of train-r1 (tail)\nstep 1\nTraceback: boom" in out
    assert "eval-r10-step1" not in out


def test_run_show_prints_a_recorded_error_on_one_line(deployment, capsys):
    _seed_runs(deployment)
    runs = RunsTable(boto3.client("dynamodb"), deployment.runs_table)
    error = (
        "TrainingJobFailed: Ray job train-r2 ended FAILED: Job entrypoint command failed with exit code 1\n"
        'more\n | log tail: step 1\nTraceback (most recent call last):\n  File "x.py"\nboom\n'
    )
    runs.set_status("r2", "FAILED", error=error)
    status, out, _ = cli(capsys, "run", "show", "r2")
    [line] = [line for line in out.splitlines() if line.startswith("  error")]
    assert line == (
        "  error         TrainingJobFailed: Ray job train-r2 ended FAILED: "
        "Job entrypoint command failed with exit code 1 (log tail: --logs)"
    )
    assert "Traceback" not in out
    assert json.loads(cli(capsys, "run", "show", "r2", "--json")[1])["run"]["error"] == error  # kept whole


def test_run_show_json(deployment, capsys):
    _seed_runs(deployment)
    _start_executions(deployment)
    deployment.head.jobs["train-r1"] = {"status": "FAILED", "logs": "boom"}
    status, out, _ = cli(capsys, "run", "show", "r1", "--json")
    shown = json.loads(out)
    assert status == 0 and shown["run"]["status"] == "FAILED" and shown["ray_error"] is None
    assert [e["name"] for e in shown["executions"]] == ["train-r1", "eval-r1-step10"]
    assert {job["job_id"]: job["status"] for job in shown["jobs"]} == {
        "train-r1": "FAILED",
        "eval-r1-step10": "NOT_FOUND",
    }
    assert "logs_tail" not in shown["jobs"][0]


def test_run_show_without_ray_still_shows_the_run(moto_executing_asl, fake_head, capsys):
    deployment = create_deployment(fake_head, ray_address="http://127.0.0.1:9")
    _seed_runs(deployment)
    status, out, _ = cli(capsys, "run", "show", "r2")
    assert status == 0
    assert "  status        RUNNING" in out
    assert "(unavailable: " in out and "cannot reach Ray" in out


def test_run_show_refuses_an_unknown_run(deployment, capsys):
    status, out, err = cli(capsys, "run", "show", "nope")
    assert (status, out) == (2, "")
    assert err == "mazeops-ops: error: no run 'nope': no runs table row and no executions\n"


def test_executions_filters_by_state_machine_and_status(deployment, capsys):
    _start_executions(deployment)
    status, out, _ = cli(capsys, "executions")
    header, *rows = out.splitlines()
    assert status == 0 and header.split() == ["NAME", "STATE_MACHINE", "STATUS", "STARTED", "STOPPED"]
    assert sorted(row.split()[0] for row in rows) == ["eval-r1-step10", "eval-r10-step1", "train-r1"]
    out = cli(capsys, "executions", "--state-machine", "evaluation", "--json")[1]
    assert sorted(e["name"] for e in json.loads(out)) == ["eval-r1-step10", "eval-r10-step1"]
    assert cli(capsys, "executions", "--status", "FAILED")[1].splitlines()[1] == "(none)"


def test_bad_option_values_are_usage_errors(deployment, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli(capsys, "executions", "--status", "DONE")
    assert exit_info.value.code == 2


# --- guards and the cluster's health -------------------------------------------------------------


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _guarded_run(deployment: Deployment, run_id: str, guard: dict | None, status: str = "RUNNING") -> RunsTable:
    """A run accepted with `guard` settings and 6 GPUs, RUNNING for the last two hours, then in `status`."""
    runs = RunsTable(boto3.client("dynamodb"), deployment.runs_table)
    runs.create_run(
        run_id,
        f"runs/{run_id}/spec.json",
        "a" * 64,
        BASE,
        f"{deployment.training_arn}:train-{run_id}",
        guard=guard,
        num_gpus=6,
    )
    runs.set_status(run_id, "RUNNING", job_id=f"train-{run_id}")
    runs.client.update_item(
        TableName=deployment.runs_table,
        Key={"run_id": {"S": run_id}},
        UpdateExpression="SET running_at = :at",
        ExpressionAttributeValues={":at": {"S": _iso(datetime.now(UTC) - timedelta(hours=2, minutes=1))}},
    )
    if status != "RUNNING":
        runs.set_status(run_id, status)
    return runs


def _block(out: str, title: str) -> list[str]:
    return out.split(f"\n{title}\n")[1].split("\n\n")[0].splitlines()


def _collapse() -> GuardVerdict:
    points = [EvalPoint(20, 45, 64), EvalPoint(40, 12, 64), EvalPoint(60, 10, 64)]
    verdict = collapse_verdict(points, EvalPoint(0, 30, 64), CollapseGuard())
    assert verdict is not None
    return verdict


def test_run_show_prints_the_guard_settings(deployment, capsys):
    _guarded_run(deployment, "r1", GuardSpec().model_dump())
    status, out, _ = cli(capsys, "run", "show", "r1")
    assert status == 0
    assert _block(out, "guards") == [
        "  collapse      2 evaluations in a row more than 10 points below the baseline or below 50% of the run's best",
        "  stall         no new adapter for 360 min while the Ray job runs",
        "  spend         500 GPU-hours (6 GPUs; 12 spent so far)",
    ]
    assert "stopped by" not in out and "cluster" not in out


def test_run_show_says_off_for_each_guard_turned_off(deployment, capsys):
    guard = GuardSpec(
        collapse=CollapseGuard(below_baseline_points=None, consecutive_evals=1), stall_minutes=None, gpu_hours=None
    )
    _guarded_run(deployment, "r1", guard.model_dump(), status="SUCCEEDED")
    assert _block(cli(capsys, "run", "show", "r1")[1], "guards") == [
        "  collapse      1 evaluation below 50% of the run's best",
        "  stall         off",
        "  spend         off",
    ]
    _guarded_run(deployment, "r2", GuardSpec(collapse=None).model_dump(), status="SUCCEEDED")
    assert _block(cli(capsys, "run", "show", "r2")[1], "guards") == [
        "  collapse      off",
        "  stall         no new adapter for 360 min while the Ray job runs",
        "  spend         500 GPU-hours (6 GPUs)",  # finished: no spending so far
    ]


def test_run_show_of_a_row_from_before_guards(deployment, capsys):
    _seed_runs(deployment)
    assert _block(cli(capsys, "run", "show", "r1")[1], "guards") == [
        "  guards        none recorded (the run was accepted before guards existed)"
    ]
    _guarded_run(deployment, "r3", {"stall_minutes": -5})
    [line] = _block(cli(capsys, "run", "show", "r3")[1], "guards")
    assert line.startswith("  guards        the run's guard settings are invalid: stall_minutes")


def test_run_show_of_a_stopped_run_gives_the_guard_the_reason_and_the_steps(deployment, capsys):
    runs = _guarded_run(deployment, "r1", GuardSpec().model_dump())
    verdict = _collapse()
    assert runs.mark_stopped("r1", verdict)
    status, out, _ = cli(capsys, "run", "show", "r1")
    assert status == 0
    run_lines = _block("\n" + out, "run r1")
    assert "  status        STOPPED" in run_lines
    assert f"  stopped by    {verdict.reason}" in run_lines
    assert verdict.reason.startswith("collapse: 12/64 (step 40) and 10/64 (step 60) after best 45/64 (step 20)")
    assert "  steps         40, 60 (marked on the learning curve)" in run_lines
    [at] = [line for line in run_lines if line.startswith("  stopped at")]
    assert at.split()[-1] == runs.get_run("r1").stopped_by["at"]
    shown = json.loads(cli(capsys, "run", "show", "r1", "--json")[1])
    assert shown["run"]["stopped_by"]["guard"] == "collapse" and shown["run"]["stopped_by"]["steps"] == [40, 60]
    assert shown["run"]["guard"]["stall_minutes"] == 360
    assert ["r1", "STOPPED", BASE] in [row.split()[:3] for row in cli(capsys, "run", "list")[1].splitlines()]


def test_a_stall_stop_names_no_steps(deployment, capsys):
    runs = _guarded_run(deployment, "r1", GuardSpec().model_dump())
    now = datetime.now(UTC)
    verdict = stall_verdict(now, now - timedelta(hours=7), None, None, 360)
    assert verdict is not None and runs.mark_stopped("r1", verdict)
    out = cli(capsys, "run", "show", "r1")[1]
    assert "  stopped by    stall: no new adapter for" in out and "  steps " not in out


def test_run_show_says_the_cluster_is_unreachable_while_the_run_is_active(deployment, capsys):
    _guarded_run(deployment, "r1", GuardSpec().model_dump())
    _guarded_run(deployment, "r2", GuardSpec().model_dump(), status="SUCCEEDED")
    since = _iso(datetime.now(UTC) - timedelta(minutes=23, seconds=10))
    health = ClusterHealth(
        reachable=False, checked_at=_iso(datetime.now(UTC)), unreachable_since=since, error="connection refused"
    )
    write_health(boto3.client("dynamodb"), deployment.runs_table, health)
    out = cli(capsys, "run", "show", "r1")[1]
    assert f"  cluster       unreachable since {since} (23 min): connection refused" in _block("\n" + out, "run r1")
    assert json.loads(cli(capsys, "run", "show", "r1", "--json")[1])["cluster"] == {
        **dataclasses.asdict(health),
        "notified_at": None,
    }
    assert "cluster" not in cli(capsys, "run", "show", "r2")[1]  # finished: the cluster no longer matters to it
    write_health(boto3.client("dynamodb"), deployment.runs_table, ClusterHealth(True, _iso(datetime.now(UTC))))
    assert "cluster" not in cli(capsys, "run", "show", "r1")[1]
    assert json.loads(cli(capsys, "run", "show", "r1", "--json")[1])["cluster"]["reachable"] is True


def test_run_list_skips_the_cluster_health_row(deployment, capsys):
    _seed_runs(deployment)
    write_health(boto3.client("dynamodb"), deployment.runs_table, ClusterHealth(True, _iso(datetime.now(UTC))))
    rows = cli(capsys, "run", "list")[1].splitlines()[1:]
    assert sorted(row.split()[0] for row in rows) == ["r1", "r2"]
    assert sorted(run["run_id"] for run in json.loads(cli(capsys, "run", "list", "--json")[1])) == ["r1", "r2"]


@given(
    points=st.one_of(st.none(), st.floats(0.5, 100).map(lambda value: round(value, 1))),
    fraction=st.one_of(st.none(), st.floats(0.01, 0.99).map(lambda value: round(value, 2))),
    count=st.integers(1, 20),
)
def test_collapse_text_names_each_arm_that_is_on(points, fraction, count):
    assume(points is not None or fraction is not None)
    text = collapse_text(
        CollapseGuard(below_baseline_points=points, below_best_fraction=fraction, consecutive_evals=count)
    )
    assert ("points below the baseline" in text) == (points is not None)
    assert ("of the run's best" in text) == (fraction is not None)
    if points is not None:
        assert f" more than {points:g} points below the baseline" in text
    if fraction is not None:
        assert text.endswith(f" below {fraction:.0%} of the run's best")
    assert text.startswith("1 evaluation " if count == 1 else f"{count} evaluations in a row ")
    assert collapse_text(None) == "off"
