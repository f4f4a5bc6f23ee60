"""The burst benchmark's stub Ray cluster: concurrency bound, Jobs API answers, result writing."""

from __future__ import annotations

import functools
import threading
import time
import urllib.request

import pytest
from mazeops_testing import BUCKET, Aws, put_adapter

from benchmarks.stub_ray_cluster import (
    InvalidSubmission,
    JobExists,
    StubCluster,
    StubJob,
    StubRayJobsServer,
    UnknownJob,
    parse_submission,
    write_eval_result,
)
from cluster_jobs.maze.eval_set import eval_set_for_size
from mazeops.baseline import baseline_result_key, parse_baseline_result
from mazeops.evalresult import parse_eval_result
from mazeops.jobs import baseline_job
from mazeops.ray_jobs import RayJobNotFound, RayJobsClient

EVAL_SET = eval_set_for_size(7)


def _count_overlap(jobs: list[StubJob]) -> int:
    """The most jobs whose RUNNING intervals overlap at one moment, from their recorded times."""
    moments = sorted([(job.running_since, 1) for job in jobs] + [(job.end_time / 1000, -1) for job in jobs])
    running = most = 0
    for _, change in moments:
        running += change
        most = max(most, running)
    return most


def test_cluster_runs_at_most_max_running_jobs_and_finishes_every_job() -> None:
    finished: list[str] = []
    lock = threading.Lock()

    def finish(job: StubJob) -> None:
        with lock:
            finished.append(job.submission_id)

    cluster = StubCluster(max_running=3, job_seconds=0.2, finish=finish)
    for index in range(10):
        cluster.submit(f"eval-burst-step{index + 1}", "python -m x", {"kind": "eval"})
    statuses = {job.status for job in cluster.jobs()}
    assert statuses == {"RUNNING", "PENDING"}
    assert sum(job.status == "RUNNING" for job in cluster.jobs()) == 3

    assert cluster.wait_until_idle(timeout_s=10)
    jobs = cluster.jobs()
    assert [job.status for job in jobs] == ["SUCCEEDED"] * 10
    assert sorted(finished) == sorted(job.submission_id for job in jobs)
    assert cluster.stats.max_running_seen == 3
    assert cluster.stats.submitted == 10
    assert _count_overlap(jobs) <= 3
    assert all(job.start_time <= job.running_since * 1000 <= job.end_time for job in jobs)


def test_cluster_refuses_a_reused_submission_id_and_reports_a_failed_finish() -> None:
    def finish(job: StubJob) -> None:
        raise OSError("disk full")

    cluster = StubCluster(max_running=1, job_seconds=0, finish=finish)
    cluster.submit("eval-a-step1", "python -m x")
    with pytest.raises(JobExists, match="already exists"):
        cluster.submit("eval-a-step1", "python -m x")
    assert cluster.wait_until_idle(timeout_s=5)
    job = cluster.get("eval-a-step1")
    assert job.status == "FAILED"
    assert "OSError: disk full" in job.message
    assert (cluster.stats.submitted, cluster.stats.refused_duplicates) == (1, 1)
    with pytest.raises(UnknownJob):
        cluster.get("eval-a-step2")


@pytest.mark.parametrize(("max_running", "job_seconds"), [(0, 1.0), (2, -1.0)])
def test_cluster_refuses_bad_settings(max_running: int, job_seconds: float) -> None:
    with pytest.raises(ValueError, match="must"):
        StubCluster(max_running=max_running, job_seconds=job_seconds, finish=lambda job: None)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1]",
        b'{"entrypoint": "x"}',
        b'{"submission_id": "a", "entrypoint": 3}',
        b'{"submission_id": "a", "entrypoint": "x", "metadata": [1]}',
    ],
)
def test_parse_submission_refuses_malformed_bodies(body: bytes) -> None:
    with pytest.raises(InvalidSubmission):
        parse_submission(body)


def test_jobs_api_speaks_to_the_lambdas_ray_client() -> None:
    release = threading.Event()
    cluster = StubCluster(max_running=1, job_seconds=0, finish=lambda job: release.wait(5))
    with StubRayJobsServer(cluster) as server:
        client = RayJobsClient(server.address)
        first = client.submit("eval-run-step1", "python -m cluster_jobs.evaluate.run", metadata={"step": "1"})
        queued = client.submit("eval-run-step2", "python -m cluster_jobs.evaluate.run")
        again = client.submit("eval-run-step1", "python -m cluster_jobs.evaluate.run")
        assert (first.status, first.already_submitted) == ("RUNNING", False)
        assert queued.status == "PENDING"
        assert (again.status, again.already_submitted) == ("RUNNING", True)
        release.set()
        assert cluster.wait_until_idle(timeout_s=5)
        done = client.get("eval-run-step1")
        assert done.status == "SUCCEEDED" and done.terminal
        assert done.start_time <= done.end_time
        assert "eval-run-step1" in client.logs_tail("eval-run-step1")
        with pytest.raises(RayJobNotFound):
            client.get("eval-run-step9")
        refused = urllib.request.Request(f"{server.address}/api/jobs/", data=b"[]", method="POST")
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(refused, timeout=5)
        assert answer.value.code == 400
    assert cluster.stats.submitted == 2


def test_write_eval_result_writes_a_valid_result_for_the_jobs_adapter(aws: Aws) -> None:
    put_adapter(aws.s3, "burst", 7)
    output = "runs/burst/evals/global_step_7/result.json"
    entrypoint = (
        f"python -m cluster_jobs.evaluate.run --manifest s3://{BUCKET}/runs/burst/adapters/global_step_7/manifest.json "
        f"--base-model-path /models/x --backend vllm --output s3://{BUCKET}/{output}"
    )
    job = StubJob(
        "eval-burst-step7", entrypoint, {"kind": "eval"}, start_time=int(time.time() * 1000), running_since=time.time()
    )

    write_eval_result(aws.s3, EVAL_SET, job)

    result = parse_eval_result(aws.s3.get_object(Bucket=BUCKET, Key=output)["Body"].read())
    assert (result.run_id, result.step, result.adapter_name) == ("burst", 7, "burst-step7")
    assert (result.eval_set_sha256, result.seeds) == (EVAL_SET.sha256, list(EVAL_SET.seeds))
    assert (result.n_solved, result.backend) == (0, "stub")


def test_write_eval_result_writes_a_baseline_for_a_baseline_job(aws: Aws) -> None:
    request = baseline_job(BUCKET, "transformers", "tiny-qwen3-vl", "/models/tiny", EVAL_SET.sha256, attempt=2)
    job = StubJob(request.job_id, request.entrypoint, request.metadata, start_time=0, running_since=time.time())

    write_eval_result(aws.s3, EVAL_SET, job)

    written = aws.s3.get_object(Bucket=BUCKET, Key=baseline_result_key("tiny-qwen3-vl", EVAL_SET.sha256, 2))
    baseline = parse_baseline_result(written["Body"].read())
    assert (baseline.base_model_id, baseline.eval_set_name, baseline.eval_set_sha256) == (
        "tiny-qwen3-vl",
        EVAL_SET.name,
        EVAL_SET.sha256,
    )
    assert (baseline.seeds, baseline.n_solved, baseline.backend) == (list(EVAL_SET.seeds), 0, "stub")


@pytest.mark.parametrize(
    ("entrypoint", "error"),
    [
        ("python -m cluster_jobs.evaluate.run --manifest", InvalidSubmission),
        ("python --manifest s3://b/k --output nowhere", ValueError),
    ],
)
def test_write_eval_result_refuses_an_entrypoint_without_s3_locations(aws: Aws, entrypoint: str, error: type) -> None:
    job = StubJob("eval-burst-step1", entrypoint, {}, start_time=0, running_since=0.0)
    with pytest.raises(error):
        write_eval_result(aws.s3, EVAL_SET, job)


def test_a_finish_that_writes_results_makes_the_job_succeed(aws: Aws) -> None:
    put_adapter(aws.s3, "burst", 1)
    entrypoint = (
        f"python -m cluster_jobs.evaluate.run --manifest s3://{BUCKET}/runs/burst/adapters/global_step_1/manifest.json "
        f"--output s3://{BUCKET}/runs/burst/evals/global_step_1/result.json"
    )
    cluster = StubCluster(max_running=2, job_seconds=0, finish=functools.partial(write_eval_result, aws.s3, EVAL_SET))
    cluster.submit("eval-burst-step1", entrypoint)
    assert cluster.wait_until_idle(timeout_s=10)
    assert cluster.get("eval-burst-step1").status == "SUCCEEDED"
    assert aws.s3.head_object(Bucket=BUCKET, Key="runs/burst/evals/global_step_1/result.json")["ContentLength"] > 0
