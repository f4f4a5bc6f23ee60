"""A stand-in Ray cluster for the burst: the Ray Jobs REST API on the standard library, running no code.

Jobs wait for one of `max_running` slots, run for `job_seconds`, then `finish(job)` decides their end;
`write_eval_result` writes the result an evaluation job would.
"""

from __future__ import annotations

import collections
import json
import shlex
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from cluster_jobs.evaluate.artifacts import parse_s3_uri
from cluster_jobs.maze.eval_set import EvalSet
from mazeops.baseline import BaselineResult
from mazeops.evalresult import EvalResult, MazeOutcome
from mazeops.manifest import MAX_MANIFEST_BYTES, parse_manifest
from mazeops.s3_objects import read_limited

JOBS_PATH = "/api/jobs/"
STUB_BACKEND = "stub"


class JobExists(ValueError):
    """A job with this submission id was submitted before."""


class UnknownJob(LookupError):
    """No job has this submission id."""


class InvalidSubmission(ValueError):
    """The submission is not a JSON object with a string `entrypoint` and `submission_id`."""


@dataclass
class StubJob:
    """One submitted job, described as Ray's Jobs API describes it."""

    submission_id: str
    entrypoint: str
    metadata: dict[str, str]
    start_time: int  # ms since the epoch, set at submission (Ray's JobInfo.start_time)
    status: str = "PENDING"
    message: str = "Job is waiting for a free slot."
    end_time: int | None = None
    running_since: float | None = None  # time.time() when the job got its slot

    def describe(self) -> dict[str, Any]:
        """The job as ``GET /api/jobs/<id>`` answers it."""
        return {
            "type": "SUBMISSION",
            "submission_id": self.submission_id,
            "job_id": None,
            "status": self.status,
            "entrypoint": self.entrypoint,
            "message": self.message,
            "metadata": self.metadata,
            "start_time": self.start_time,
            "end_time": self.end_time,
        }


@dataclass
class ClusterStats:
    """What the cluster saw: submissions accepted and refused, and the most jobs RUNNING at once."""

    submitted: int = 0
    refused_duplicates: int = 0
    max_running_seen: int = 0
    submission_ids: list[str] = field(default_factory=list)


class StubCluster:
    """Admits jobs, runs at most `max_running` at a time for `job_seconds` each, then calls `finish(job)`."""

    def __init__(self, max_running: int, job_seconds: float, finish: Callable[[StubJob], None]):
        if max_running < 1:
            raise ValueError(f"max_running must be at least 1, got {max_running}")
        if job_seconds < 0:
            raise ValueError(f"job_seconds must not be negative, got {job_seconds}")
        self.max_running = max_running
        self.job_seconds = job_seconds
        self.finish = finish
        self.stats = ClusterStats()
        self._jobs: dict[str, StubJob] = {}
        self._pending: collections.deque[StubJob] = collections.deque()
        self._running = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def submit(self, submission_id: str, entrypoint: str, metadata: dict[str, str] | None = None) -> StubJob:
        """Queue a job; raises JobExists for a reused submission id."""
        with self._lock:
            if submission_id in self._jobs:
                self.stats.refused_duplicates += 1
                raise JobExists(f"job with submission_id {submission_id} already exists")
            job = StubJob(submission_id, entrypoint, dict(metadata or {}), start_time=int(time.time() * 1000))
            self._jobs[submission_id] = job
            self.stats.submitted += 1
            self.stats.submission_ids.append(submission_id)
            self._pending.append(job)
            self._start_pending()
            return job

    def get(self, submission_id: str) -> StubJob:
        """The job `submission_id`; raises UnknownJob."""
        with self._lock:
            if submission_id not in self._jobs:
                raise UnknownJob(f"job {submission_id} does not exist")
            return self._jobs[submission_id]

    def jobs(self) -> list[StubJob]:
        """Every job, in submission order."""
        with self._lock:
            return list(self._jobs.values())

    def wait_until_idle(self, timeout_s: float) -> bool:
        """Block until no job is PENDING or RUNNING; False if that did not happen within `timeout_s`."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._pending and self._running == 0, timeout=timeout_s)

    def _start_pending(self) -> None:
        """Give free slots to the oldest PENDING jobs (call with the lock held)."""
        while self._pending and self._running < self.max_running:
            job = self._pending.popleft()
            job.status, job.message, job.running_since = "RUNNING", "Job is running.", time.time()
            self._running += 1
            self.stats.max_running_seen = max(self.stats.max_running_seen, self._running)
            threading.Thread(target=self._run, args=(job,), name=f"stub-job-{job.submission_id}", daemon=True).start()

    def _run(self, job: StubJob) -> None:
        time.sleep(self.job_seconds)
        try:
            self.finish(job)
            status, message = "SUCCEEDED", "Job finished successfully."
        except Exception as error:  # a failed job is reported through the API, as Ray does
            status, message = "FAILED", f"Job entrypoint command failed: {type(error).__name__}: {error}"
        with self._lock:
            job.status, job.message, job.end_time = status, message, int(time.time() * 1000)
            self._running -= 1
            self._start_pending()
            self._idle.notify_all()


def parse_submission(body: bytes) -> tuple[str, str, dict[str, str]]:
    """(submission_id, entrypoint, metadata) of a ``POST /api/jobs/`` body; raises InvalidSubmission."""
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidSubmission(f"submission is not JSON: {error}") from None
    if not isinstance(request, dict):
        raise InvalidSubmission("submission must be a JSON object")
    submission_id, entrypoint = request.get("submission_id"), request.get("entrypoint")
    metadata = request.get("metadata") or {}
    if not isinstance(submission_id, str) or not submission_id or not isinstance(entrypoint, str):
        raise InvalidSubmission("submission needs a string submission_id and entrypoint (this stub does not make ids)")
    if not isinstance(metadata, dict):
        raise InvalidSubmission("metadata must be a JSON object")
    return submission_id, entrypoint, {str(key): str(value) for key, value in metadata.items()}


class _JobsApiHandler(BaseHTTPRequestHandler):
    """Routes the Jobs API paths to the server's StubCluster."""

    server: StubRayJobsServer

    def do_POST(self) -> None:
        if self.path.rstrip("/") != JOBS_PATH.rstrip("/"):
            self._answer(404, {"error": f"no route POST {self.path}"})
            return
        try:
            submission_id, entrypoint, metadata = parse_submission(
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
            )
            self.server.cluster.submit(submission_id, entrypoint, metadata)
        except InvalidSubmission as error:
            self._answer(400, {"error": str(error)})
        except JobExists as error:
            self._answer(500, {"error": str(error)})  # what Ray answers for a reused id
        else:
            self._answer(200, {"submission_id": submission_id})

    def do_GET(self) -> None:
        route = self.path[len(JOBS_PATH) :] if self.path.startswith(JOBS_PATH) else None
        if not route:
            self._answer(404, {"error": f"no route GET {self.path}"})
            return
        quoted_id, _, rest = route.partition("/")
        if rest not in ("", "logs"):
            self._answer(404, {"error": f"no route GET {self.path}"})
            return
        try:
            job = self.server.cluster.get(urllib.parse.unquote(quoted_id))
        except UnknownJob as error:
            self._answer(404, {"error": str(error)})
            return
        description = job.describe()
        self._answer(200, description if rest == "" else {"logs": f"stub job {job.submission_id}: {job.message}\n"})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the benchmark prints its own summary."""


class StubRayJobsServer(ThreadingHTTPServer):
    """The Jobs REST API of a StubCluster on 127.0.0.1 at a free port; a context manager."""

    daemon_threads = True

    def __init__(self, cluster: StubCluster):
        super().__init__(("127.0.0.1", 0), _JobsApiHandler)
        self.cluster = cluster
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        """The base URL to use as RAY_ADDRESS."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> StubRayJobsServer:
        self._thread = threading.Thread(target=self.serve_forever, name="stub-ray-jobs-api", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()
        self.server_close()


def write_eval_result(s3: Any, eval_set: EvalSet, job: StubJob) -> None:
    """Write the result an evaluation job `job` would write to its ``--output``, every maze unsolved.

    A baseline job (metadata ``kind`` ``baseline``) gets a ``maze-baseline/v1`` result for its
    ``--base-model-id``; an adapter's gets a ``maze-eval/v1`` result for the adapter its
    ``--manifest`` names, read as the real job reads it.
    """
    argv = shlex.split(job.entrypoint)
    output = parse_s3_uri(_option(argv, "--output"))
    outcomes = [MazeOutcome(seed=seed, solved=False, turns=0) for seed in eval_set.seeds]
    started_at = datetime.fromtimestamp(job.running_since or time.time(), UTC).isoformat(timespec="seconds")
    finished_at = datetime.now(UTC).isoformat(timespec="seconds")
    result: BaselineResult | EvalResult
    if job.metadata.get("kind") == "baseline":
        result = BaselineResult(
            base_model_id=_option(argv, "--base-model-id"),
            eval_set_name=eval_set.name,
            eval_set_sha256=eval_set.sha256,
            outcomes=outcomes,
            backend=STUB_BACKEND,
            started_at=started_at,
            finished_at=finished_at,
        )
    else:
        manifest_location = parse_s3_uri(_option(argv, "--manifest"))
        manifest = parse_manifest(read_limited(s3, manifest_location.bucket, manifest_location.key, MAX_MANIFEST_BYTES))
        result = EvalResult.of_outcomes(
            outcomes,
            run_id=manifest.run_id,
            step=manifest.step,
            adapter_name=manifest.adapter_name,
            base_model_id=manifest.base_model_id,
            eval_set_sha256=eval_set.sha256,
            backend=STUB_BACKEND,
            started_at=started_at,
            finished_at=finished_at,
        )
    s3.put_object(Bucket=output.bucket, Key=output.key, Body=result.to_json().encode(), ContentType="application/json")


def _option(argv: list[str], name: str) -> str:
    """The value after option `name` in an entrypoint's argv; raises InvalidSubmission when absent."""
    if name not in argv[:-1]:
        raise InvalidSubmission(f"not an evaluation entrypoint (no {name} value): {shlex.join(argv)[:200]!r}")
    return argv[argv.index(name) + 1]
