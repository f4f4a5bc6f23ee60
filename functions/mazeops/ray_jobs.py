"""A small Ray Jobs REST client over the standard library (no ray, no requests in the Lambda).

Every failure is RayUnavailable (retriable), RayJobNotFound or RayJobError (RayAuthRejected for a refused token);
`submit` is idempotent by submission id. `authenticated_client` is how the product gets one: whoever reaches the
Jobs API runs code on the cluster's GPUs, so it is never called without Ray's token authentication.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from mazeops import jsontext

TERMINAL_STATUSES = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})


class RayUnavailable(RuntimeError):
    """The Ray head could not be reached or failed (connection, timeout, HTTP 5xx): retry later."""


class RayJobNotFound(LookupError):
    """The Ray head has no job with this submission id (HTTP 404)."""


class RayJobError(RuntimeError):
    """The Ray head refused the request (HTTP 4xx) or answered something that is not the Jobs API."""


class RayAuthRejected(RayJobError):
    """The Ray head refused the request's token (HTTP 401: none sent, 403: a wrong one)."""


class MissingRayAuthToken(ValueError):
    """No Ray authentication token is configured, so the product does not call the Jobs API."""


class InvalidRayAddress(ValueError):
    """The address is not an http(s) dashboard URL."""


@dataclasses.dataclass(frozen=True)
class JobInfo:
    """State of one submitted Ray job."""

    submission_id: str
    status: str
    message: str | None = None
    start_time: int | None = None
    end_time: int | None = None
    error_type: str | None = None
    driver_exit_code: int | None = None
    already_submitted: bool = False

    @property
    def terminal(self) -> bool:
        """True once the job is STOPPED, SUCCEEDED or FAILED."""
        return self.status in TERMINAL_STATUSES


class RayJobsClient:
    """Client of one Ray head's Jobs REST API."""

    def __init__(self, address: str, timeout_s: float = 10.0, headers: dict[str, str] | None = None) -> None:
        parsed = urllib.parse.urlsplit(address)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InvalidRayAddress(
                f"Ray address must be the dashboard's http(s) URL, got {address[:200]!r} (the stack reaches Ray "
                "through an internal load balancer in the cluster's VPC, not a sagemaker_ray:// endpoint: "
                "docs/cluster.md)"
            )
        self.address = address.rstrip("/")
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})

    def submit(
        self,
        submission_id: str,
        entrypoint: str,
        runtime_env: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
        entrypoint_num_cpus: float | None = None,
        entrypoint_num_gpus: float | None = None,
        entrypoint_resources: dict[str, float] | None = None,
    ) -> JobInfo:
        """Submit a job under `submission_id`, or return the existing one with `already_submitted=True`."""
        try:
            return self._existing(submission_id)
        except RayJobNotFound:
            pass
        body: dict[str, Any] = {"entrypoint": entrypoint, "submission_id": submission_id}
        optional = {
            "runtime_env": runtime_env,
            "metadata": metadata,
            "entrypoint_num_cpus": entrypoint_num_cpus,
            "entrypoint_num_gpus": entrypoint_num_gpus,
            "entrypoint_resources": entrypoint_resources,
        }
        body.update({name: value for name, value in optional.items() if value is not None})
        try:
            self._request("POST", "/api/jobs/", body)
        except RayUnavailable:
            # Ray answers 500 for a reused submission id: a concurrent submit won the race.
            try:
                return self._existing(submission_id)
            except RayJobNotFound:
                raise RayUnavailable(f"Ray failed to submit job {submission_id!r} and has no such job") from None
        return self.get(submission_id)

    def get(self, submission_id: str) -> JobInfo:
        """Current state of the job `submission_id`."""
        answer = self._request("GET", f"/api/jobs/{_quote(submission_id)}")
        if not isinstance(answer, dict) or not isinstance(answer.get("status"), str):
            raise RayJobError(f"Ray answered an unexpected job description for {submission_id!r}: {str(answer)[:200]}")
        return JobInfo(
            submission_id=answer.get("submission_id") or submission_id,
            status=answer["status"],
            message=answer.get("message"),
            start_time=answer.get("start_time"),
            end_time=answer.get("end_time"),
            error_type=answer.get("error_type"),
            driver_exit_code=answer.get("driver_exit_code"),
        )

    def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job; True if it was stopped, False if it had already ended."""
        answer = self._request("POST", f"/api/jobs/{_quote(submission_id)}/stop")
        # Current Ray answers {"stopped": bool}; some versions answer a bare JSON boolean.
        if isinstance(answer, dict) and isinstance(answer.get("stopped"), bool):
            return answer["stopped"]
        if isinstance(answer, bool):
            return answer
        raise RayJobError(f"Ray answered an unexpected stop response for {submission_id!r}: {str(answer)[:200]}")

    def logs_tail(self, submission_id: str, max_chars: int = 4000) -> str:
        """The last `max_chars` characters of the job's driver logs."""
        answer = self._request("GET", f"/api/jobs/{_quote(submission_id)}/logs")
        if not isinstance(answer, dict) or not isinstance(answer.get("logs"), str):
            raise RayJobError(f"Ray answered unexpected logs for {submission_id!r}: {str(answer)[:200]}")
        return answer["logs"][-max_chars:] if max_chars > 0 else ""

    def version(self) -> dict[str, Any]:
        """The head's API and Ray versions (`version`, `ray_version`, `ray_commit`, ...)."""
        answer = self._request("GET", "/api/version")
        if not isinstance(answer, dict):
            raise RayJobError(f"Ray answered an unexpected version: {str(answer)[:200]}")
        return answer

    def _existing(self, submission_id: str) -> JobInfo:
        return dataclasses.replace(self.get(submission_id), already_submitted=True)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", **self.headers}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.address + path, data=data, headers=headers, method=method)
        target = f"{method} {path}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            detail = _error_text(error)
            if error.code == 404:
                raise RayJobNotFound(f"{target}: not found ({detail})") from None
            if error.code in (401, 403):
                raise RayAuthRejected(
                    f"{target}: Ray refused the request's token (HTTP {error.code}: {detail}); the token must be the "
                    "one the cluster was started with (RAY_AUTH_TOKEN)"
                ) from None
            if error.code >= 500:
                raise RayUnavailable(f"{target}: Ray answered HTTP {error.code} ({detail})") from None
            raise RayJobError(f"{target}: Ray answered HTTP {error.code} ({detail})") from None
        except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            raise RayUnavailable(f"{target}: cannot reach Ray at {self.address}: {reason}") from None
        try:
            return jsontext.loads(raw)
        except jsontext.NotJson:
            raise RayJobError(f"{target}: Ray answered non-JSON: {raw[:200]!r}") from None


def authenticated_client(address: str, token: str, timeout_s: float = 10.0) -> RayJobsClient:
    """A client of the head at `address` that sends `token` as Ray's bearer token (Ray >= 2.52, RAY_AUTH_MODE=token).

    Raises:
        MissingRayAuthToken: if `token` is empty.
        InvalidRayAddress: if `address` is not an http(s) URL.
    """
    if not token:
        raise MissingRayAuthToken(
            "the Ray auth token is empty: the Ray Jobs API runs code on the cluster, so it is only called with the "
            "cluster's token (the stack's RayAuthTokenSecret; see docs/cluster.md)"
        )
    return RayJobsClient(address, timeout_s, headers={"Authorization": f"Bearer {token}"})


def _quote(submission_id: str) -> str:
    return urllib.parse.quote(submission_id, safe="")


def _error_text(error: urllib.error.HTTPError) -> str:
    try:
        return error.read(500).decode("utf-8", "replace").strip() or error.reason
    except OSError:
        return str(error.reason)
