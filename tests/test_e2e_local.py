"""End to end on the real local stack (started as `local_stack.pipeline` starts it, with a real Ray head and the
local Serve app): a run trained for real from the SFT start and promoted over the baseline by McNemar's exact test,
then a job failing on the cluster, a stopped run, duplicate uploads, a challenger no better than the champion, an
adapter whose weights do not match its manifest, a spec that is not JSON, and the ops CLI on the live stack.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch

from cluster_jobs.maze.eval_set import eval_set_for_size
from local_stack.pipeline import (
    BASE_MODEL_ID,
    MAZE_SIZE,
    deploy_serve_app,
    prepare_base_model,
    stack_parameters,
    tiny_run_spec,
)
from local_stack.schedules import fire_scheduled_rule
from local_stack.stack import LocalStack, LocalStackConfig
from mazeops import layout, names
from mazeops.champion_rows import ChampionPointer, champion_model_id
from mazeops.cluster_health import parse_time, read_health
from mazeops.decision import mcnemar_exact
from mazeops.evalresult import parse_eval_result
from mazeops.manifest import AdapterManifest, parse_manifest
from mazeops.ray_jobs import RayJobNotFound, RayJobsClient
from mazeops.registry import Registry
from mazeops.runs import RunRecord, RunsTable
from mazeops.runspec import GuardSpec
from mazeops.serve_client import load_smoke_image
from opsctl import cli
from opsctl.follow import follow_execution
from opsctl.queries.executions import execution_arn, list_executions
from opsctl.target import Target, local_target
from tests.mazeops_testing import log_messages

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[1]
POLL_SECONDS = 1
# Named in the stack's BASE_MODELS with a path that holds no model: the validation Lambda accepts a spec for it (the
# path is the cluster's business) and the training job then fails on the cluster side.
MISSING_BASE_MODEL_ID = "missing-model"
HAPPY_RUN = "e2e-happy"
STEP = 2  # the tiny runs save one adapter, at their last step
EXECUTION_TIMEOUT_S = 300
LEARNING_TIMEOUT_S = 1200  # the happy run's real GRPO steps (about 4 minutes alone on one core)
HISTORY_TAIL = 12
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ALPHA = 0.05  # the template's McnemarAlpha default


# --- the stack -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The local stack with a Ray head and the Serve app, for the whole module."""
    moto_logger = logging.getLogger("moto")
    level = moto_logger.level
    moto_logger.setLevel(logging.CRITICAL)  # moto logs each failed ASL state with its whole parse tree
    state_dir = tmp_path_factory.mktemp("e2e-stack")
    base_model_path = prepare_base_model(state_dir)
    parameters = stack_parameters(base_model_path, POLL_SECONDS)
    base_models = json.loads(parameters["BaseModels"])
    base_models[MISSING_BASE_MODEL_ID] = str(state_dir / "models" / MISSING_BASE_MODEL_ID)
    parameters["BaseModels"] = json.dumps(base_models)
    config = LocalStackConfig(
        template_path=REPO_ROOT / "template.yaml",
        state_dir=state_dir,
        parameters=parameters,
        with_ray=True,
        serve_port=0,
    )
    try:
        with LocalStack(config) as running:
            deploy_serve_app(running, base_model_path)
            yield running
    finally:
        moto_logger.setLevel(level)


@pytest.fixture(scope="module")
def state_file(stack: LocalStack) -> Path:
    """The stack.json the ops CLI reads with --local-state."""
    return Path(stack.config.state_dir) / "stack.json"


@pytest.fixture(scope="module")
def target(state_file: Path) -> Target:
    """The ops CLI's view of the stack: clients on the moto endpoint, Ray address, serve URL."""
    return local_target(state_file)


# --- helpers ---------------------------------------------------------------------------------


def learning_spec_json(stack: LocalStack) -> bytes:
    """`make local`'s run spec up to its first adapter (STEP steps), unchanged."""
    return json.dumps(tiny_run_spec(STEP, STEP, Path(stack.config.state_dir) / "shared")).encode()


def spec_json(stack: LocalStack, **changes: Any) -> bytes:
    """A tiny run spec (the pipeline's at plumbing size, 2 steps, one adapter at step 2) with `changes` applied."""
    plumbing = {"train_batch_size": 2, "policy_mini_batch_size": 2, "n_samples_per_prompt": 2, "max_turns": 3}
    spec = tiny_run_spec(STEP, STEP, Path(stack.config.state_dir) / "shared") | plumbing | changes
    return json.dumps(spec).encode()


def put(target: Target, key: str, body: bytes) -> None:
    """Upload `body` to the artifacts bucket (its S3 event reaches EventBridge)."""
    target.client("s3").put_object(Bucket=target.bucket, Key=key, Body=body)


def read(target: Target, key: str) -> bytes:
    """An object of the artifacts bucket."""
    return target.client("s3").get_object(Bucket=target.bucket, Key=key)["Body"].read()


def keys_under(target: Target, prefix: str) -> list[str]:
    """Sorted keys of the artifacts bucket under `prefix`."""
    pages = target.client("s3").get_paginator("list_objects_v2").paginate(Bucket=target.bucket, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def arn_of(target: Target, machine: str, name: str) -> str:
    """The ARN of execution `name` of state machine `machine` (`training` or `evaluation`)."""
    return execution_arn(target.state_machines[machine], name)


def finish(target: Target, machine: str, name: str, timeout_s: float = EXECUTION_TIMEOUT_S) -> dict[str, Any]:
    """Follow execution `name` (it may not have started yet) to its end; return its description."""
    follow_execution(target, machine, name, name, interval_s=1, progress_s=30, timeout_s=timeout_s)
    return target.client("stepfunctions").describe_execution(executionArn=arn_of(target, machine, name))


def explain(target: Target, machine: str, name: str) -> str:
    """The execution's end, the tail of its history and its Ray job's log tail: a failed assertion's message."""
    sfn = target.client("stepfunctions")
    arn = arn_of(target, machine, name)
    try:
        execution = sfn.describe_execution(executionArn=arn)
    except sfn.exceptions.ExecutionDoesNotExist:
        lines = [f"execution {name}: does not exist"]
    else:
        ending = " ".join(filter(None, (execution["status"], execution.get("error"), execution.get("cause"))))
        lines = [f"execution {name}: {ending}"]
        events = sfn.get_execution_history(executionArn=arn)["events"][-HISTORY_TAIL:]
        for event in events:
            details = {key: value for key, value in event.items() if key.endswith("EventDetails")}
            lines.append(f"  #{event['id']} {event['type']} {json.dumps(details, default=str)[:400]}")
    jobs = target.ray_jobs()
    try:
        job = jobs.get(name)
    except RayJobNotFound:
        lines.append(f"Ray job {name}: not submitted")
    else:
        lines.append(f"Ray job {name}: {job.status} {job.message or ''}")
        lines.append(jobs.logs_tail(name, max_chars=3000))
    return "\n".join(lines)


def wait_until(check: Callable[[], Any], timeout_s: float, what: str, report: Callable[[], str] = lambda: "") -> Any:
    """Poll `check` until it returns something true; fail with `what` and `report()` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s:.0f} s for {what}\n{report()}")
        time.sleep(0.5)


def job_status(jobs: RayJobsClient, job_id: str) -> str | None:
    """The Ray job's status, None before it is submitted."""
    try:
        return jobs.get(job_id).status
    except RayJobNotFound:
        return None


def ray_submission_ids(target: Target) -> list[str]:
    """Submission ids of every job the Ray head knows (`GET /api/jobs/`, with the stack secret's token), sorted."""
    headers = {"Authorization": f"Bearer {target.ray_auth_token()}"}
    request = urllib.request.Request(f"{target.ray_address}/api/jobs/", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return sorted(str(job["submission_id"]) for job in json.load(response) if job.get("submission_id"))


def lambda_log_lines(stack: LocalStack, function_output: str) -> list[str]:
    """Every log line of the Lambda function named by stack output `function_output` (one per CloudWatch event)."""
    return log_messages(stack.session, f"/aws/lambda/{stack.outputs[function_output]}")


def logged(stack: LocalStack, function_output: str, message: str, **fields: Any) -> list[dict[str, Any]]:
    """The function's Powertools log records (JSON lines) whose message starts with `message` and that have `fields`."""
    records = []
    for line in lambda_log_lines(stack, function_output):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (
            isinstance(record, dict)
            and str(record.get("message", "")).startswith(message)
            and all(record.get(name) == value for name, value in fields.items())
        ):
            records.append(record)
    return records


def log_tail(stack: LocalStack, function_output: str) -> Callable[[], str]:
    """A report for `wait_until`: the function's last 30 log lines."""
    return lambda: "\n".join(lambda_log_lines(stack, function_output)[-30:])


def chat_completion(serve_url: str, model_id: str) -> tuple[int, dict[str, Any]]:
    """POST the smoke maze picture to `/v1/chat/completions` for `model_id`; return (HTTP status, JSON body)."""
    image = "data:image/png;base64," + base64.b64encode(load_smoke_image()).decode("ascii")
    body = {
        "model": model_id,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": image}},
                    {"type": "text", "text": "Which move brings the blue agent closer to the red target?"},
                ],
            }
        ],
        "max_tokens": 8,
        "temperature": 0,
    }
    request = urllib.request.Request(
        f"{serve_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, {"error_body": error.read(2000).decode("utf-8", "replace")}


def assert_openai_completion(status: int, completion: dict[str, Any], model_id: str) -> None:
    """HTTP 200 and the OpenAI chat completion shape, answered by `model_id`."""
    assert status == 200, completion
    assert completion["object"] == "chat.completion" and completion["id"].startswith("chatcmpl-")
    assert completion["model"] == model_id
    [choice] = completion["choices"]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    usage = completion["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


def get_run(target: Target, run_id: str) -> RunRecord | None:
    """The run's row of the runs table."""
    return RunsTable(target.client("dynamodb"), target.runs_table).get_run(run_id)


def registry(target: Target) -> Registry:
    """The adapter registry of the stack."""
    return Registry(target.client("dynamodb"), target.registry_table)


# --- the happy run ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HappyRun:
    """The descriptions of the happy run's training and evaluation executions, as they ended."""

    training: dict[str, Any]
    evaluation: dict[str, Any]


@pytest.fixture(scope="module")
def happy_run(stack: LocalStack, target: Target) -> HappyRun:
    """Upload the learning run spec and follow its training and its one adapter's evaluation to their ends."""
    put(target, layout.run_spec_request_key(HAPPY_RUN), learning_spec_json(stack))
    training = finish(target, "training", names.training_job_id(HAPPY_RUN), timeout_s=LEARNING_TIMEOUT_S)
    evaluation = finish(target, "evaluation", names.eval_job_id(HAPPY_RUN, STEP))
    return HappyRun(training=training, evaluation=evaluation)


# --- tests, in the order they run ------------------------------------------------------------


def test_a_run_spec_upload_trains_an_adapter_promoted_over_the_baseline_by_mcnemar(
    target: Target, happy_run: HappyRun
) -> None:
    train_name, eval_name = names.training_job_id(HAPPY_RUN), names.eval_job_id(HAPPY_RUN, STEP)
    adapter = names.adapter_name(HAPPY_RUN, STEP)
    jobs = target.ray_jobs()

    assert happy_run.training["status"] == "SUCCEEDED", explain(target, "training", train_name)
    assert happy_run.evaluation["status"] == "SUCCEEDED", explain(target, "evaluation", eval_name)
    assert jobs.get(train_name).status == "SUCCEEDED"
    run = get_run(target, HAPPY_RUN)
    assert run is not None
    assert (run.status, run.job_id, run.error) == ("SUCCEEDED", train_name, None)
    assert run.execution_arn == happy_run.training["executionArn"]

    adapter_prefix = layout.adapter_prefix(HAPPY_RUN, STEP)
    assert keys_under(target, layout.run_prefix(HAPPY_RUN)) == sorted(
        [
            layout.normalized_spec_key(HAPPY_RUN),
            layout.train_metrics_key(HAPPY_RUN),
            *(adapter_prefix + name for name in layout.ADAPTER_FILES),
            layout.adapter_manifest_key(HAPPY_RUN, STEP),
            layout.eval_result_key(HAPPY_RUN, STEP),
        ]
    )
    manifest = parse_manifest(read(target, layout.adapter_manifest_key(HAPPY_RUN, STEP)))
    assert (manifest.adapter_name, manifest.base_model_id) == (adapter, BASE_MODEL_ID)
    for name in layout.ADAPTER_FILES:
        data = read(target, adapter_prefix + name)
        assert (manifest.files[name].sha256, manifest.files[name].size) == (hashlib.sha256(data).hexdigest(), len(data))
    metrics = [json.loads(line) for line in read(target, layout.train_metrics_key(HAPPY_RUN)).splitlines()]
    assert [line["step"] for line in metrics] == [1, 2]

    assert jobs.get(eval_name).status == "SUCCEEDED"
    result = parse_eval_result(read(target, layout.eval_result_key(HAPPY_RUN, STEP)))
    eval_set = eval_set_for_size(MAZE_SIZE)
    assert (result.adapter_name, result.n_total, result.eval_set_sha256) == (adapter, 64, eval_set.sha256)
    assert [outcome.seed for outcome in result.outcomes] == list(eval_set.seeds)

    baseline = registry(target).get_baseline(BASE_MODEL_ID, eval_set.sha256)
    assert baseline is not None and baseline.status == "READY", baseline
    assert baseline.n_total == 64 and len(baseline.outcomes) == 64
    record = registry(target).get_adapter(BASE_MODEL_ID, adapter)
    assert record is not None
    assert (record.n_total, record.n_solved) == (64, result.n_solved)
    assert record.outcomes == "".join("1" if outcome.solved else "0" for outcome in result.outcomes)
    # Promoted because McNemar's exact test on the recorded outcomes against the baseline (the first
    # champion) says the adapter is significantly better; GRPO made the adapter from the SFT start.
    test = mcnemar_exact(record.outcomes, baseline.outcomes)
    evidence = record.decision  # the reason and the evidence fields, flat
    assert (evidence["b"], evidence["c"], evidence["p_value"]) == (test.b, test.c, pytest.approx(test.p_value))
    print(
        f"{adapter}: {record.n_solved}/64 against the baseline's {baseline.n_solved}/64, "
        f"b={test.b} c={test.c} p={test.p_value:.4f}"
    )
    assert test.b > test.c and test.p_value < ALPHA, record.decision
    assert record.solve_rate >= float(stack_parameters(Path(), POLL_SECONDS)["MinSolveRate"])
    assert record.status == "CHAMPION", record.decision
    assert "significantly better than the baseline" in record.decision["reason"], record.decision
    pointer = registry(target).get_champion(BASE_MODEL_ID)
    assert pointer is not None and pointer.champion == adapter
    serving_prefix = f"{layout.serving_prefix(BASE_MODEL_ID)}{adapter}/"
    assert keys_under(target, serving_prefix) == [serving_prefix + n for n in layout.ADAPTER_FILES]

    model_id = champion_model_id(BASE_MODEL_ID, pointer)
    assert_openai_completion(*chat_completion(target.serve_url, model_id), model_id)


def test_the_happy_run_ran_with_the_default_guards_and_none_stopped_it(target: Target, happy_run: HappyRun) -> None:
    run = get_run(target, HAPPY_RUN)

    assert run is not None and run.status == "SUCCEEDED", run
    assert run.guard == GuardSpec().model_dump(mode="json")
    assert (run.num_gpus, run.stopped_by) == (1, None)
    assert run.running_at is not None
    assert parse_time(run.created_at) <= parse_time(run.running_at) <= parse_time(run.updated_at)


def test_a_job_failing_on_the_cluster_fails_the_training_and_keeps_the_error(stack: LocalStack, target: Target) -> None:
    run_id = "e2e-failed"
    name = names.training_job_id(run_id)
    put(target, layout.run_spec_request_key(run_id), spec_json(stack, base_model_id=MISSING_BASE_MODEL_ID))

    execution = finish(target, "training", name)
    report = explain(target, "training", name)
    assert (execution["status"], execution.get("error")) == ("FAILED", "TrainingJobFailed"), report
    job = target.ray_jobs().get(name)
    assert job.status == "FAILED", report
    assert f"Ray job {name} ended FAILED: {job.message}" in execution["cause"]
    assert "exit code 1" in execution["cause"]
    assert (
        f"TinyBackendError: the tiny backend trains only '{BASE_MODEL_ID}', not '{MISSING_BASE_MODEL_ID}'"
        in (execution["cause"])
    )
    run = get_run(target, run_id)
    assert run is not None
    assert (run.status, run.error) == ("FAILED", f"TrainingJobFailed: {execution['cause']}")

    # stop_ray_job also hears of the failure; it must keep the recorded error.
    wait_until(
        lambda: logged(stack, "StopRayJobFunctionName", "Run already finished", run_id=run_id),
        60,
        f"stop_ray_job to handle the FAILED event of {name}",
        log_tail(stack, "StopRayJobFunctionName"),
    )
    assert get_run(target, run_id) == run


def test_stopping_a_training_execution_stops_its_ray_job_and_aborts_the_run(stack: LocalStack, target: Target) -> None:
    run_id = "e2e-stopped"
    name = names.training_job_id(run_id)
    jobs = target.ray_jobs()
    champion_before = registry(target).get_champion(BASE_MODEL_ID)
    long_run = spec_json(stack, total_steps=200, ckpt_interval=200, eval_interval=200)  # no adapter before the stop
    put(target, layout.run_spec_request_key(run_id), long_run)

    def report() -> str:
        return explain(target, "training", name)

    wait_until(lambda: job_status(jobs, name) == "RUNNING", 120, f"Ray job {name} RUNNING", report)

    sfn = target.client("stepfunctions")
    sfn.stop_execution(executionArn=arn_of(target, "training", name), cause="e2e test")
    wait_until(lambda: job_status(jobs, name) == "STOPPED", 60, f"Ray job {name} STOPPED", report)

    assert sfn.describe_execution(executionArn=arn_of(target, "training", name))["status"] == "ABORTED"
    stop_requests = wait_until(
        lambda: logged(stack, "StopRayJobFunctionName", "Ray job stop requested", job_id=name),
        30,
        f"stop_ray_job to log its stop of {name}",
        log_tail(stack, "StopRayJobFunctionName"),
    )
    assert [record["stopped"] for record in stop_requests] == [True]
    run = get_run(target, run_id)
    assert run is not None and run.status == "ABORTED" and run.error.startswith("execution ABORTED at "), run
    assert keys_under(target, f"{layout.run_prefix(run_id)}adapters/") == []
    assert [r for r in registry(target).list_adapters(BASE_MODEL_ID) if r.run_id == run_id] == []
    assert registry(target).get_champion(BASE_MODEL_ID) == champion_before


def test_re_uploading_a_manifest_or_a_run_spec_starts_no_second_execution_or_job(
    stack: LocalStack, target: Target, happy_run: HappyRun
) -> None:
    train_name, eval_name = names.training_job_id(HAPPY_RUN), names.eval_job_id(HAPPY_RUN, STEP)
    executions_before = list_executions(target, ["training", "evaluation"])
    jobs_before = ray_submission_ids(target)
    duplicate = "Duplicate event answered from the idempotency table"
    answered_before = {
        name: len(logged(stack, "StartExecutionFunctionName", duplicate, execution_name=name))
        for name in (train_name, eval_name)
    }

    for key in (layout.adapter_manifest_key(HAPPY_RUN, STEP), layout.run_spec_request_key(HAPPY_RUN)):
        put(target, key, read(target, key))

    for name, before in answered_before.items():
        wait_until(
            lambda name=name, before=before: (
                len(logged(stack, "StartExecutionFunctionName", duplicate, execution_name=name)) == before + 1
            ),
            60,
            f"start_execution to answer the re-upload for {name} as a duplicate",
            log_tail(stack, "StartExecutionFunctionName"),
        )
    executions_after = list_executions(target, ["training", "evaluation"])
    assert executions_after == executions_before
    assert {row["name"] for row in executions_after if HAPPY_RUN in row["name"]} == {train_name, eval_name}
    assert ray_submission_ids(target) == jobs_before


def upload_happy_adapter_as(target: Target, run_id: str, **file_sha256: str) -> None:
    """Upload the happy run's adapter files, unchanged, as run `run_id`'s step STEP: the run's
    normalized spec (the happy run's, renamed: the evaluation reads its maze size there), then, as
    the checkpoint sync does, the adapter files and last a manifest naming that run (with any
    file's sha256 replaced by `file_sha256`)."""
    spec = json.loads(read(target, layout.normalized_spec_key(HAPPY_RUN))) | {"run_id": run_id}
    put(target, layout.normalized_spec_key(run_id), json.dumps(spec).encode())
    source = parse_manifest(read(target, layout.adapter_manifest_key(HAPPY_RUN, STEP)))
    document = source.model_dump(by_alias=True) | {"run_id": run_id, "adapter_name": names.adapter_name(run_id, STEP)}
    for file_name, sha256 in file_sha256.items():
        document["files"][file_name]["sha256"] = sha256
    manifest = AdapterManifest.model_validate(document)
    for file_name in layout.ADAPTER_FILES:
        source_key = layout.adapter_prefix(HAPPY_RUN, STEP) + file_name
        put(target, layout.adapter_prefix(run_id, STEP) + file_name, read(target, source_key))
    put(target, layout.adapter_manifest_key(run_id, STEP), manifest.to_json().encode())


def assert_champion_stays(target: Target, champion: ChampionPointer | None, adapter: str) -> None:
    """The champion pointer is still `champion`, nothing of `adapter` is served, and the champion answers."""
    assert registry(target).get_champion(BASE_MODEL_ID) == champion
    assert keys_under(target, f"{layout.serving_prefix(BASE_MODEL_ID)}{adapter}/") == []
    model_id = champion_model_id(BASE_MODEL_ID, champion)
    assert_openai_completion(*chat_completion(target.serve_url, model_id), model_id)


def test_a_challenger_no_better_than_the_champion_is_rejected_and_the_champion_stays(
    target: Target, happy_run: HappyRun
) -> None:
    run_id = "e2e-same"
    adapter, name = names.adapter_name(run_id, STEP), names.eval_job_id(run_id, STEP)
    champion = registry(target).get_champion(BASE_MODEL_ID)
    assert champion is not None and champion.champion == names.adapter_name(HAPPY_RUN, STEP)
    champion_record = registry(target).get_adapter(BASE_MODEL_ID, champion.champion)
    assert champion_record is not None
    upload_happy_adapter_as(target, run_id)  # the champion's own weights under another name

    execution = finish(target, "evaluation", name)
    assert execution["status"] == "SUCCEEDED", explain(target, "evaluation", name)
    record = registry(target).get_adapter(BASE_MODEL_ID, adapter)
    assert record is not None
    # Evaluated for real: the same weights play every maze as the champion did, so McNemar's test
    # finds no discordant pair, and no evidence is no promotion.
    assert record.outcomes == champion_record.outcomes
    assert (record.status, record.decision["b"], record.decision["c"]) == ("REJECTED", 0, 0), record.decision
    assert record.decision["p_value"] == pytest.approx(1.0)
    assert "significantly better" not in record.decision["reason"], record.decision
    assert_champion_stays(target, champion, adapter)


def test_an_adapter_whose_weights_do_not_match_its_manifest_is_refused(target: Target, happy_run: HappyRun) -> None:
    run_id = "e2e-broken"
    adapter, name = names.adapter_name(run_id, STEP), names.eval_job_id(run_id, STEP)
    champion = registry(target).get_champion(BASE_MODEL_ID)
    weights_file = layout.ADAPTER_FILES[1]
    upload_happy_adapter_as(target, run_id, **{weights_file: hashlib.sha256(b"other weights").hexdigest()})

    execution = finish(target, "evaluation", name)
    report = explain(target, "evaluation", name)
    # check_adapter checks sizes only; the evaluation job verifies the sha256 before loading anything.
    assert (execution["status"], execution.get("error")) == ("FAILED", "EvaluationJobFailed"), report
    assert f"{weights_file} does not match the manifest" in execution["cause"], report
    assert target.ray_jobs().get(name).status == "FAILED"
    record = registry(target).get_adapter(BASE_MODEL_ID, adapter)
    assert record is not None
    assert (record.status, record.error) == ("EVAL_FAILED", f"EvaluationJobFailed: {execution['cause']}")
    assert_champion_stays(target, champion, adapter)


def test_a_run_spec_that_is_not_json_fails_validation_without_a_ray_job(target: Target) -> None:
    run_id = "e2e-bad-json"
    name = names.training_job_id(run_id)
    put(target, layout.run_spec_request_key(run_id), b'{"base_model_id": "tiny-qwen3-vl", "total_steps": ')

    execution = finish(target, "training", name)
    report = explain(target, "training", name)
    assert (execution["status"], execution.get("error")) == ("FAILED", "InvalidRunSpec"), report
    assert "run spec is not valid JSON" in execution["cause"]
    with pytest.raises(RayJobNotFound):
        target.ray_jobs().get(name)
    assert name not in ray_submission_ids(target)
    assert get_run(target, run_id) is None


def test_the_ops_cli_shows_the_live_stack(
    state_file: Path, happy_run: HappyRun, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    local = ["--local", "--local-state", str(state_file)]
    adapter = names.adapter_name(HAPPY_RUN, STEP)
    capsys.readouterr()

    assert cli.main(["adapters", "leaderboard", BASE_MODEL_ID, "--json", *local]) == 0
    entries = json.loads(capsys.readouterr().out)
    [champion] = [entry for entry in entries if entry["champion"]]
    happy = next(entry for entry in entries if entry["adapter_name"] == adapter)
    assert (happy["run_id"], happy["step"], happy["n_total"]) == (HAPPY_RUN, STEP, 64)
    assert champion["adapter_name"] == adapter, entries

    assert cli.main(["run", "show", HAPPY_RUN, *local]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    assert rows[:2] == [["run", HAPPY_RUN], ["status", "SUCCEEDED"]], out
    jobs = (("training", names.training_job_id(HAPPY_RUN)), ("evaluation", names.eval_job_id(HAPPY_RUN, STEP)))
    for machine, job_id in jobs:
        assert [job_id, machine, "SUCCEEDED"] in [row[:3] for row in rows], out  # the executions table
        assert [job_id, "SUCCEEDED", "Job", "finished", "successfully."] in rows, out  # the Ray jobs table

    png = tmp_path / "curve.png"
    assert cli.main(["curve", "--run", HAPPY_RUN, "--out", str(png), *local]) == 0
    out = capsys.readouterr().out
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    assert f"wrote {png}" in out
    [eval_row] = [line.split() for line in out.splitlines() if line.split()[:3] == [HAPPY_RUN, str(STEP), "eval"]]
    assert eval_row[-1] == "*", out  # the champion is starred


def upload_adapter_as(target: Target, run_id: str, step: int, weights: bytes) -> None:
    """Upload the happy run's adapter config with `weights` as run `run_id`'s step `step`, manifest last."""
    source = parse_manifest(read(target, layout.adapter_manifest_key(HAPPY_RUN, STEP)))
    config_file, weights_file = layout.ADAPTER_FILES
    config = read(target, layout.adapter_prefix(HAPPY_RUN, STEP) + config_file)
    document = source.model_dump(by_alias=True) | {
        "run_id": run_id,
        "step": step,
        "adapter_name": names.adapter_name(run_id, step),
    }
    for file_name, body in ((config_file, config), (weights_file, weights)):
        document["files"][file_name] = {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body)}
        put(target, layout.adapter_prefix(run_id, step) + file_name, body)
    put(target, layout.adapter_manifest_key(run_id, step), AdapterManifest.model_validate(document).to_json().encode())


def damaged(weights: bytes, scale: float) -> bytes:
    """LoRA weights with every `lora_B` matrix multiplied by `scale`: an update gone wrong."""
    tensors = safetensors.torch.load(weights)
    return safetensors.torch.save({name: t * scale if "lora_B" in name else t for name, t in tensors.items()})


def test_a_run_whose_adapters_collapse_is_stopped_by_its_guard_and_the_champion_stays(
    stack: LocalStack, target: Target, happy_run: HappyRun
) -> None:
    run_id = "e2e-collapse"
    name = names.training_job_id(run_id)
    jobs = target.ray_jobs()
    champion = registry(target).get_champion(BASE_MODEL_ID)
    assert champion is not None and champion.champion == names.adapter_name(HAPPY_RUN, STEP)
    # Writes no adapter itself; one collapsed evaluation is enough here (the default, two in a row, is shown by
    # tests/test_faults_local.py and tests/test_mazeops_guards.py).
    guard = {"collapse": {"consecutive_evals": 1}}
    long_run = spec_json(stack, total_steps=200, ckpt_interval=200, eval_interval=200, guard=guard)
    put(target, layout.run_spec_request_key(run_id), long_run)

    def report() -> str:
        return explain(target, "training", name)

    wait_until(lambda: job_status(jobs, name) == "RUNNING", 120, f"Ray job {name} RUNNING", report)
    wait_until(lambda: get_run(target, run_id).status == "RUNNING", 60, f"run {run_id} RUNNING", report)
    weights = read(target, layout.adapter_prefix(HAPPY_RUN, STEP) + layout.ADAPTER_FILES[1])
    # A good first checkpoint (the champion's own weights), then one whose update went wrong.
    for step, body in ((10, weights), (20, damaged(weights, 200.0))):
        upload_adapter_as(target, run_id, step, body)
        finish(target, "evaluation", names.eval_job_id(run_id, step))

    # Evaluated for real: the damaged adapter plays the mazes badly enough to trip the collapse guard.
    solved = {r.step: r.n_solved for r in registry(target).list_adapters(BASE_MODEL_ID) if r.run_id == run_id}
    run = get_run(target, run_id)
    assert run is not None and run.status == "STOPPED", (run, solved)
    assert run.stopped_by["guard"] == "collapse" and run.stopped_by["steps"] == [20], run.stopped_by
    reason = f"collapse: {solved[20]}/64 (step 20) after best {solved[10]}/64 (step 10)"
    assert run.stopped_by["reason"].startswith(reason), run.stopped_by
    wait_until(lambda: job_status(jobs, name) == "STOPPED", 60, f"Ray job {name} STOPPED", report)
    execution = target.client("stepfunctions").describe_execution(executionArn=arn_of(target, "training", name))
    assert (execution["status"], execution.get("error"), execution.get("cause")) == (
        "ABORTED",
        "RunGuard",
        run.stopped_by["reason"],
    )
    statuses = {r.step: r.status for r in registry(target).list_adapters(BASE_MODEL_ID) if r.run_id == run_id}
    assert statuses == {10: "REJECTED", 20: "REJECTED"}, statuses
    assert registry(target).get_champion(BASE_MODEL_ID) == champion


# --- last: the Ray head restarts (its jobs and the Serve app end with it) --------------------


def watch_once(stack: LocalStack) -> dict[str, Any]:
    """Fire the cluster watch's schedule rule (every 5 minutes on AWS) and wait for that watch's summary."""
    done = "Cluster watch done"
    before = len(logged(stack, "WatchClusterFunctionName", done))
    events = stack.session.client("events")
    fire_scheduled_rule(events, stack.physical_id("WatchClusterFunctionClusterWatch"))
    records = wait_until(
        lambda: logged(stack, "WatchClusterFunctionName", done)[before:],
        60,
        "the cluster watch to end",
        log_tail(stack, "WatchClusterFunctionName"),
    )
    return records[0]["summary"]


def test_a_ray_head_outage_is_shown_its_failed_evaluation_retried_and_its_lost_job_fails_the_run(
    stack: LocalStack, target: Target, state_file: Path, happy_run: HappyRun, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, step = "e2e-head-restart", 10
    name = names.training_job_id(run_id)
    first, second = names.eval_job_id(run_id, step), names.eval_job_id(run_id, step, attempt=2)
    jobs = target.ray_jobs()
    champion_before = registry(target).get_champion(BASE_MODEL_ID)
    put(target, layout.run_spec_request_key(run_id), spec_json(stack, total_steps=200, ckpt_interval=200))

    def report() -> str:
        return explain(target, "training", name)

    wait_until(lambda: job_status(jobs, name) == "RUNNING", 120, f"Ray job {name} RUNNING", report)
    stack.ray.halt()

    # Down: the watch records since when, the run shows it, an adapter uploaded now fails its evaluation at submit.
    assert watch_once(stack)["reachable"] is False
    health = read_health(target.client("dynamodb"), target.runs_table)
    assert health is not None and health.unreachable_since is not None
    capsys.readouterr()
    assert (
        cli.main(["run", "show", run_id, "--local-state", str(Path(stack.config.state_dir) / "stack.json"), "--local"])
        == 0
    )
    assert f"unreachable since {health.unreachable_since}" in capsys.readouterr().out
    weights = read(target, layout.adapter_prefix(HAPPY_RUN, STEP) + layout.ADAPTER_FILES[1])
    upload_adapter_as(target, run_id, step, weights)
    failed = finish(target, "evaluation", first)
    assert (failed["status"], failed.get("error")) == ("FAILED", "RayUnavailable"), explain(target, "evaluation", first)
    assert registry(target).get_adapter(BASE_MODEL_ID, names.adapter_name(run_id, step)).status == "EVAL_FAILED"

    # Back (a new head): the lost training job fails its run; the next watch runs the evaluation again.
    stack.ray.restart()
    execution = finish(target, "training", name, timeout_s=60)
    assert (execution["status"], execution.get("error")) == ("FAILED", "RayJobLost"), report()
    assert job_status(jobs, name) is None  # the restarted head does not know it
    run = get_run(target, run_id)
    assert run is not None and run.status == "FAILED", run
    assert run.error.startswith(f"RayJobLost: Ray job {name} no longer exists on the cluster"), run

    # The watch starts it once EvalRetryBackoffSeconds (5 s locally) have passed since the failure.
    retried = wait_until(lambda: watch_once(stack)["retried"], 60, "the watch to start the evaluation again")
    assert retried == [second]
    assert finish(target, "evaluation", second)["status"] == "SUCCEEDED", explain(target, "evaluation", second)
    record = registry(target).get_adapter(BASE_MODEL_ID, names.adapter_name(run_id, step))
    assert (record.status, record.eval_attempts, record.n_total) == ("REJECTED", 2, 64), record
    assert "is FAILED" in record.decision["reason"], record.decision  # evaluated for real, never promoted
    assert read_health(target.client("dynamodb"), target.runs_table).reachable
    assert registry(target).get_champion(BASE_MODEL_ID) == champion_before
