"""Run a Lambda function's real handler code inside this process, without Docker, one invocation at a time.

The rules it keeps (isolation, serialization, environment, logs) are in docs/design.md.
"""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_stack import lambda_code
from local_stack.credentials import FAKE_CREDENTIALS
from local_stack.lambda_code import FunctionError, LambdaCodeLoader, UnpackedCode
from local_stack.lambda_context import LambdaContext
from local_stack.lambda_payload import error_payload, result_payload
from local_stack.thread_environ import host_environment, thread_environ
from local_stack.thread_output import captured_output

# os.environ, sys.path, sys.modules and sys.stdout/stderr are process-wide: one handler runs at a time.
_INVOKE_LOCK = threading.Lock()
# Frames of these files are the runtime's, not the function's: they stay out of an error's stackTrace.
_RUNTIME_FILES = {__file__, lambda_code.__file__}


@dataclass(frozen=True)
class LambdaSpec:
    """What the runner needs to know about one deployed Lambda function."""

    function_name: str
    function_arn: str
    handler: str
    code_zip: bytes
    environment: Mapping[str, str]
    timeout_s: int
    memory_mb: int
    region: str
    version: str = "$LATEST"


@dataclass(frozen=True)
class InvocationResult:
    """The outcome of one invocation, as the Lambda service reports it."""

    payload: str
    errored: bool
    logs: str


class InProcessLambdaRunner:
    """Runs Lambda handlers in this process, as the AWS Python runtime would run them."""

    def __init__(self, cache_dir: Path, endpoint_url: str):
        """cache_dir: where code zips are unpacked; endpoint_url: the AWS endpoint handlers use."""
        self.endpoint_url = endpoint_url
        self.code = LambdaCodeLoader(cache_dir)

    def invoke(self, spec: LambdaSpec, event: Any) -> InvocationResult:
        """Run one invocation of `spec` with `event`; never raises for the function's failures.

        The logs are what the invoking thread printed or logged, framed by START/END/REPORT lines
        as in CloudWatch Logs. Never call it from a handler: the lock would wait forever.
        """
        request_id = str(uuid.uuid4())
        context = LambdaContext(
            function_name=spec.function_name,
            function_version=spec.version,
            invoked_function_arn=spec.function_arn,
            memory_limit_in_mb=int(spec.memory_mb),
            aws_request_id=request_id,
            log_group_name=f"/aws/lambda/{spec.function_name}",
            log_stream_name=f"{time.strftime('%Y/%m/%d')}/[{spec.version}]{request_id.replace('-', '')}",
            deadline=time.monotonic() + float(spec.timeout_s),
        )
        with _INVOKE_LOCK:
            started = time.monotonic()
            with captured_output() as captured:
                print(f"START RequestId: {request_id} Version: {spec.version}")
                payload, errored = self._run(spec, event, context)
            duration_ms = (time.monotonic() - started) * 1000
        logs = (
            captured.getvalue()
            + f"END RequestId: {request_id}\n"
            + f"REPORT RequestId: {request_id}\tDuration: {duration_ms:.2f} ms\t"
            + f"Memory Size: {spec.memory_mb} MB\n"
        )
        return InvocationResult(payload=payload, errored=errored, logs=logs)

    def _run(self, spec: LambdaSpec, event: Any, context: LambdaContext) -> tuple[str, bool]:
        """(payload, errored) of one invocation; the handler module is imported under the function's environment."""
        try:
            code = self.code.unpack(spec.code_zip)
            with thread_environ(self._environment(spec, context, code)), self.code.importable(code):
                handler = self.code.handler(code, spec.function_name, spec.handler)
                result = handler(event, context)
        except FunctionError as exc:
            return _reported_error(exc.error_type, str(exc), context, exc), True
        except SystemExit as exc:
            message = f"RequestId: {context.aws_request_id} Error: Runtime exited with error: exit status {exc.code}"
            return _reported_error("Runtime.ExitError", message, context, None), True
        except Exception as exc:  # the handler's own failure: reported, not raised
            return _reported_error(type(exc).__name__, str(exc), context, exc), True
        try:
            return result_payload(result), False
        except (TypeError, ValueError) as exc:
            return _reported_error("Runtime.MarshalError", f"Unable to marshal response: {exc}", context, None), True

    def _environment(self, spec: LambdaSpec, context: LambdaContext, code: UnpackedCode) -> dict[str, str]:
        """This process's environment without AWS_* settings, plus the Lambda runtime's and the function's."""
        environment = {name: value for name, value in host_environment().items() if not name.startswith("AWS_")}
        environment.update(FAKE_CREDENTIALS)
        environment.update(
            {
                "AWS_ENDPOINT_URL": self.endpoint_url,
                "AWS_REGION": spec.region,
                "AWS_DEFAULT_REGION": spec.region,
                "AWS_LAMBDA_FUNCTION_NAME": spec.function_name,
                "AWS_LAMBDA_FUNCTION_VERSION": spec.version,
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
                "AWS_LAMBDA_LOG_GROUP_NAME": context.log_group_name,
                "AWS_LAMBDA_LOG_STREAM_NAME": context.log_stream_name,
                "AWS_SAM_LOCAL": "true",  # as `sam local` sets it (Powertools' Tracer turns itself off)
                "LAMBDA_TASK_ROOT": str(code.directory),
                "_HANDLER": spec.handler,
            }
        )
        environment.update({name: str(value) for name, value in spec.environment.items()})
        return environment


def _reported_error(error_type: str, message: str, context: LambdaContext, exc: BaseException | None) -> str:
    """Log a function error as the runtime does and return its payload (the function's frames only)."""
    frames = traceback.extract_tb(exc.__traceback__) if exc else []
    stack = traceback.format_list([frame for frame in frames if frame.filename not in _RUNTIME_FILES])
    print(f"[ERROR] {error_type}: {message}\n" + "".join(stack), end="")
    return error_payload(error_type, message, context.aws_request_id, stack)
