"""`baseline show | evaluate` against a moto registry and bucket and a fake Ray head."""

from __future__ import annotations

import json
import shlex

import pytest
from mazeops_testing import baseline_result
from opsctl_testing import BASE, Deployment, bits_with, cli, seed_baseline

from cluster_jobs.maze.eval_set import eval_set_for_size
from mazeops.baseline import baseline_result_key

SET_9 = eval_set_for_size(9)
SET_7 = eval_set_for_size(7)


def job_id(attempt: int = 1, eval_set_sha256: str = SET_9.sha256) -> str:
    return f"baseline-{BASE}-{eval_set_sha256[:12]}-a{attempt}"


def put_result(deployment: Deployment, solved: int, attempt: int = 1, eval_set=SET_9) -> None:
    """What the baseline's Ray job writes when it succeeds."""
    result = baseline_result(bits_with(solved), eval_set.sha256, BASE, eval_set.name)
    key = baseline_result_key(BASE, eval_set.sha256, attempt)
    deployment.s3.put_object(Bucket=deployment.bucket, Key=key, Body=result.to_json().encode())


def evaluate(capsys, *options: str) -> tuple[int, str, str]:
    return cli(capsys, "baseline", "evaluate", BASE, "--interval", "0.01", *options)


def test_evaluate_submits_the_pipelines_job_waits_and_records_the_baseline(deployment, capsys):
    deployment.head.submitted_statuses = ["PENDING", "RUNNING", "SUCCEEDED"]
    put_result(deployment, solved=9)
    status, out, err = evaluate(capsys)
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        f"baseline of {BASE} on maze-eval-64: attempt 1, Ray job {job_id()} submitted (PENDING)",
        f"Ray job {job_id()}: RUNNING",
        f"Ray job {job_id()}: SUCCEEDED",
        f"baseline of {BASE} on maze-eval-64 recorded: solved 9/64 mazes (solve rate 0.141)",
    ]
    request = deployment.head.jobs[job_id()]["request"]
    assert shlex.split(request["entrypoint"]) == [
        "python",
        "-m",
        "cluster_jobs.evaluate.run",
        "--base-model-id",
        BASE,
        "--eval-set-sha256",
        SET_9.sha256,
        "--base-model-path",
        "/shared/models/qwen3-vl-8b-sft",
        "--backend",
        "vllm",
        "--output",
        f"s3://{deployment.bucket}/{baseline_result_key(BASE, SET_9.sha256, 1)}",
    ]
    assert request["entrypoint_num_gpus"] == 1 and request["entrypoint_resources"] == {"serve_gpu": 1}
    assert request["metadata"]["kind"] == "baseline"
    baseline = deployment.registry.get_baseline(BASE, SET_9.sha256)
    assert (baseline.status, baseline.n_solved, baseline.job_id) == ("READY", 9, job_id())
    status, out, _ = evaluate(capsys)  # evaluated once
    assert status == 0 and out.strip() == (
        f"baseline of {BASE} on maze-eval-64 is recorded already (it is evaluated once): "
        f"solved 9/64, Ray job {job_id()}"
    )
    assert list(deployment.head.jobs) == [job_id()]


def test_a_failed_baseline_gets_its_next_attempt_here(deployment, capsys):
    seed_baseline(deployment, solved=None)
    deployment.registry.fail_baseline(BASE, SET_9.sha256, 1, "Ray job ended FAILED: node lost")
    deployment.head.submitted_statuses = ["SUCCEEDED"]
    put_result(deployment, solved=3, attempt=2)
    status, out, _ = evaluate(capsys)
    assert status == 0 and f"attempt 2, Ray job {job_id(2)} submitted" in out
    assert deployment.registry.get_baseline(BASE, SET_9.sha256).status == "READY"


def test_a_failing_job_fails_the_baseline_and_exits_2(deployment, capsys):
    deployment.head.submitted_statuses = ["RUNNING", "FAILED"]
    status, out, err = evaluate(capsys)
    assert status == 2
    assert f"is FAILED (attempt 1, Ray job {job_id()}): Ray job {job_id()} ended FAILED" in err
    assert deployment.registry.get_baseline(BASE, SET_9.sha256).status == "FAILED"


def test_without_waiting_a_second_run_finds_the_same_job_and_records_it(deployment, capsys):
    status, out, _ = evaluate(capsys, "--no-wait", "--maze-size", "7")
    assert status == 0 and f"attempt 1, Ray job {job_id(1, SET_7.sha256)} submitted (PENDING)" in out
    assert deployment.registry.get_baseline(BASE, SET_7.sha256).status == "EVALUATING"
    deployment.head.jobs[job_id(1, SET_7.sha256)]["status"] = "SUCCEEDED"
    put_result(deployment, solved=30, eval_set=SET_7)
    status, out, _ = evaluate(capsys, "--maze-size", "7")
    assert status == 0 and "found already submitted (SUCCEEDED)" in out and "solved 30/64" in out
    assert list(deployment.head.jobs) == [job_id(1, SET_7.sha256)]


def test_evaluate_refusals(deployment, capsys):
    status, _, err = cli(capsys, "baseline", "evaluate", "llama-7b")
    assert status == 2 and "unknown base model 'llama-7b'" in err
    status, _, err = cli(capsys, "baseline", "evaluate", "../x")
    assert status == 2 and "invalid base model id" in err
    with pytest.raises(SystemExit):
        cli(capsys, "baseline", "evaluate", BASE, "--maze-size", "11")
    assert deployment.head.jobs == {}


def test_show_lists_the_baselines_and_marks_the_champion(deployment, capsys):
    status, _, err = cli(capsys, "baseline", "show", BASE)
    assert status == 2 and f"base model '{BASE}' has no baseline yet" in err
    seed_baseline(deployment, solved=12)
    seed_baseline(deployment, solved=None, eval_set_sha256=SET_7.sha256)
    deployment.registry.fail_baseline(BASE, SET_7.sha256, 1, "Ray job ended FAILED: CUDA OOM")
    status, out, _ = cli(capsys, "baseline", "show", BASE)
    header, *rows = [line.split() for line in out.splitlines()]
    assert header == ["EVAL_SET", "STATUS", "ATTEMPT", "SOLVE_RATE", "SOLVED", "CHAMPION", "JOB", "ERROR"]
    by_set = {row[0]: row[1:] for row in rows}
    assert by_set["maze-eval-64"] == ["READY", "1", "0.188", "12/64", "*", job_id(), "-"]
    assert by_set[f"{SET_7.sha256[:12]}..."][:6] == ["FAILED", "1", "-", "-", "-", job_id(1, SET_7.sha256)]
    assert " ".join(by_set[f"{SET_7.sha256[:12]}..."][6:]) == "Ray job ended FAILED: CUDA OOM"
    shown = json.loads(cli(capsys, "baseline", "show", BASE, "--json")[1])
    assert sorted((b["status"], b["champion"], b["outcomes"]) for b in shown) == [
        ("FAILED", False, None),
        ("READY", True, bits_with(12)),
    ]
