"""Run a Lambda function's real handler code inside this process, without Docker.

`InProcessLambdaRunner.invoke(spec, event)` does what the AWS Python runtime does for one
invocation: it unpacks the function's code zip (once per code digest, into a cache
directory), imports the handler module, calls ``handler(event, context)`` with the
function's environment variables in ``os.environ``, and returns the JSON payload, whether
the function errored, and the captured log lines. A raised exception comes back the way
AWS shapes it (``{"errorMessage", "errorType", "requestId", "stackTrace"}``, errorType =
the exception's class name), so Step Functions Retry/Catch can match error names.

What is emulated, and how:

* Isolation. Handler modules are loaded by file under a unique module name per function
  and code digest. The code directory's own top-level packages (``mazeops`` for example)
  are imported normally, but each code digest gets its own copies: during an invocation the
  code directory is first on ``sys.path`` and ``sys.modules`` holds that digest's modules;
  afterwards the host process's modules are put back. Third-party packages come from this
  process's virtual environment (it plays the role of a Lambda layer). Other threads import
  meanwhile (the moto server, a test), so ``sys.modules`` and ``os.environ`` are only ever
  walked as snapshots: a dict that grows under a Python loop raises "dictionary changed size
  during iteration", which once failed a state machine's ValidateRunSpec task.
* Serialized invocations. ``os.environ``, ``sys.path``, ``sys.modules`` and
  ``sys.stdout``/``sys.stderr`` are process-global, so one process-wide lock lets one
  handler run at a time. A handler must therefore never invoke another Lambda function
  synchronously (it would wait for the lock forever); asynchronous paths (S3 ->
  EventBridge -> Lambda, StartExecution -> Task) are fine.
* Environment. While a handler runs, the variables behind ``os.environ`` are routed by
  thread: the invoking thread sees its function's environment, every other thread the
  process's own, unchanged. (Changing the process's variables one by one made other threads
  that iterated ``os.environ`` meanwhile, as urllib's proxy lookup does for every botocore
  client and urllib request, fail with a KeyError.) Only Python sees the function's
  environment: C-level ``getenv`` and subprocesses see the process's, and a handler's own
  writes to ``os.environ`` also reach the process's C-level environment.
* AWS endpoint. The handler's environment carries ``AWS_ENDPOINT_URL`` (the local moto
  server), fake credentials and the function's region, so boto3 clients it creates talk to
  the emulator. ``AWS_SAM_LOCAL=true`` is set, as ``sam local`` does (Powertools' Tracer
  turns itself off under it).
* Logs. Whatever the invocation thread logs through the root logger, or writes to
  stdout/stderr (print, Powertools' Logger), is captured, framed by START/END/REPORT lines as
  in CloudWatch Logs. ``sys.stdout``/``sys.stderr`` are swapped for thread-routing proxies
  during the invocation; if another thread swaps them meanwhile (pytest does between test
  phases), a bare ``print`` may land there instead. Logging records and loggers created while
  the handler module was imported (Powertools) are always captured.
* Not emulated: the function timeout is only reported through
  ``context.get_remaining_time_in_millis()`` (a thread cannot be killed), memory limits,
  and the lambda runtime's separate process (module-level state survives between
  invocations of the same function, as in a warm execution environment).
"""

from __future__ import annotations

import contextlib
import decimal
import hashlib
import importlib.util
import io
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
import traceback
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}

_INVOKE_LOCK = threading.Lock()
_HANDLER_PATTERN = re.compile(r"^[A-Za-z_][\w/.]*\.[A-Za-z_]\w*$")


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


@dataclass
class LambdaContext:
    """The subset of the AWS Lambda context object that handlers and Powertools use."""

    function_name: str
    function_version: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    aws_request_id: str
    log_group_name: str
    log_stream_name: str
    deadline: float = field(repr=False)

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's configured timeout (never negative)."""
        return max(0, int((self.deadline - time.monotonic()) * 1000))


class _FunctionError(Exception):
    """A runtime-level failure reported with a fixed AWS error type (Runtime.*)."""

    def __init__(self, error_type: str, message: str):
        super().__init__(message)
        self.error_type = error_type


class _ThreadOutput(io.TextIOBase):
    """A stdout/stderr stand-in that sends one thread's writes to a buffer.

    Writes from the capturing thread land in the buffer; writes from any other thread go
    to the stream this object replaced. Loggers created while a handler module is imported
    keep a reference to it, so their later output is captured too.
    """

    def __init__(self, fallback: TextIO):
        super().__init__()
        self.fallback = fallback
        self.owner: int | None = None
        self.buffer_: io.StringIO | None = None

    @property
    def encoding(self) -> str:
        return getattr(self.fallback, "encoding", None) or "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.buffer_ is not None and threading.get_ident() == self.owner:
            return self.buffer_.write(text)
        return self.fallback.write(text)

    def flush(self) -> None:
        if self.buffer_ is None or threading.get_ident() != self.owner:
            self.fallback.flush()


_STDOUT_PROXY = _ThreadOutput(sys.stdout)
_STDERR_PROXY = _ThreadOutput(sys.stderr)


class InProcessLambdaRunner:
    """Runs Lambda handlers in this process; see the module docstring for the rules."""

    def __init__(self, cache_dir: Path, endpoint_url: str):
        """cache_dir: where code zips are unpacked; endpoint_url: the AWS endpoint handlers use."""
        self.cache_dir = Path(cache_dir)
        self.endpoint_url = endpoint_url
        self._handlers: dict[tuple[str, str, str], Callable[[Any, Any], Any]] = {}
        self._modules_by_digest: dict[str, dict[str, ModuleType]] = {}
        # One pair of proxies per process, shared by every runner: a handler's logging.StreamHandler
        # keeps the stream it was created with (Powertools adds one per logger name, once), so a
        # later runner must capture through the same proxy objects.
        self._stdout, self._stderr = _STDOUT_PROXY, _STDERR_PROXY

    def invoke(self, spec: LambdaSpec, event: Any) -> InvocationResult:
        """Run one invocation of `spec` with `event`; never raises for handler failures."""
        request_id = str(uuid.uuid4())
        log_stream = f"{time.strftime('%Y/%m/%d')}/[{spec.version}]{request_id.replace('-', '')}"
        context = LambdaContext(
            function_name=spec.function_name,
            function_version=spec.version,
            invoked_function_arn=spec.function_arn,
            memory_limit_in_mb=int(spec.memory_mb),
            aws_request_id=request_id,
            log_group_name=f"/aws/lambda/{spec.function_name}",
            log_stream_name=log_stream,
            deadline=time.monotonic() + float(spec.timeout_s),
        )
        with _INVOKE_LOCK:
            started = time.monotonic()
            with self._captured_output() as captured:
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
        try:
            code_dir, digest = self._unpacked(spec.code_zip)
            with _environ(self._environment(spec, context, code_dir)), self._namespace(code_dir, digest):
                handler = self._handler(spec, code_dir, digest)
                result = handler(event, context)
        except _FunctionError as exc:
            return self._error_payload(exc.error_type, str(exc), context, exc), True
        except SystemExit as exc:
            message = f"RequestId: {context.aws_request_id} Error: Runtime exited with error: exit status {exc.code}"
            return self._error_payload("Runtime.ExitError", message, context, None), True
        except Exception as exc:  # the handler's own failure: reported, not raised
            return self._error_payload(type(exc).__name__, str(exc), context, exc), True
        try:
            return json.dumps(result, default=_decimal_to_float), False
        except (TypeError, ValueError) as exc:
            message = f"Unable to marshal response: {exc}"
            return self._error_payload("Runtime.MarshalError", message, context, None), True

    @staticmethod
    def _error_payload(error_type: str, message: str, context: LambdaContext, exc: BaseException | None) -> str:
        frames = traceback.extract_tb(exc.__traceback__) if exc else []
        stack = traceback.format_list([frame for frame in frames if frame.filename != __file__])
        print(f"[ERROR] {error_type}: {message}\n" + "".join(stack), end="")
        return json.dumps(
            {
                "errorMessage": message,
                "errorType": error_type,
                "requestId": context.aws_request_id,
                "stackTrace": stack,
            }
        )

    def _unpacked(self, code_zip: bytes) -> tuple[Path, str]:
        """Unzip once per code digest; returns (code directory, digest)."""
        digest = hashlib.sha256(code_zip).hexdigest()
        code_dir = self.cache_dir / digest[:16]
        if code_dir.is_dir():
            return code_dir, digest
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        staging = self.cache_dir / f".{digest[:16]}.{uuid.uuid4().hex}"
        try:
            with zipfile.ZipFile(io.BytesIO(code_zip)) as archive:
                archive.extractall(staging)
        except zipfile.BadZipFile as exc:
            raise _FunctionError("Runtime.ImportModuleError", f"Could not unzip the function's code: {exc}") from exc
        try:
            staging.rename(code_dir)
        except OSError:  # another process unpacked the same digest first
            shutil.rmtree(staging, ignore_errors=True)
            if not code_dir.is_dir():
                raise
        return code_dir, digest

    def _handler(self, spec: LambdaSpec, code_dir: Path, digest: str) -> Callable[[Any, Any], Any]:
        key = (spec.function_name, digest, spec.handler)
        if key in self._handlers:
            return self._handlers[key]
        if not _HANDLER_PATTERN.match(spec.handler or ""):
            raise _FunctionError(
                "Runtime.MalformedHandlerName", f"Bad handler '{spec.handler}': expected module.function"
            )
        module_path, function_name = spec.handler.rsplit(".", 1)
        module_parts = re.split(r"[./]", module_path)
        source = code_dir.joinpath(*module_parts).with_suffix(".py")
        if not source.is_file():
            raise _FunctionError(
                "Runtime.ImportModuleError", f"Unable to import module '{module_path}': No module named '{module_path}'"
            )
        unique_name = "_lambda_{}_{}_{}".format(
            digest[:12], re.sub(r"\W", "_", spec.function_name), "_".join(module_parts)
        )
        module = _load_module(unique_name, source, package=".".join(module_parts[:-1]))
        handler = getattr(module, function_name, None)
        if not callable(handler):
            raise _FunctionError(
                "Runtime.HandlerNotFound", f"Handler '{function_name}' missing on module '{module_path}'"
            )
        self._handlers[key] = handler
        return handler

    def _environment(self, spec: LambdaSpec, context: LambdaContext, code_dir: Path) -> dict[str, str]:
        """This process's environment without AWS_* settings, plus the Lambda runtime's and the function's."""
        environment = {name: value for name, value in _host_environment().items() if not name.startswith("AWS_")}
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
                "AWS_SAM_LOCAL": "true",
                "LAMBDA_TASK_ROOT": str(code_dir),
                "_HANDLER": spec.handler,
            }
        )
        environment.update({name: str(value) for name, value in spec.environment.items()})
        return environment

    @contextlib.contextmanager
    def _namespace(self, code_dir: Path, digest: str) -> Iterator[None]:
        """Make the code directory's top-level modules (and only this digest's copies) importable."""
        own_modules = self._modules_by_digest.setdefault(digest, {})
        top_level = _top_level_names(code_dir)

        def provided_here(name: str) -> bool:
            return name.partition(".")[0] in top_level

        # Snapshots (dict.copy is one C call), never sys.modules itself: other threads import meanwhile, and a dict
        # that grows under a Python-level loop raises "dictionary changed size during iteration".
        host_modules = {name: module for name, module in sys.modules.copy().items() if provided_here(name)}
        for name in host_modules:
            del sys.modules[name]
        sys.modules.update(own_modules)
        # A new list, not an insert into the host's: another thread may be iterating the host's list in an
        # import (the path finder walks sys.path), and a list that shifts under it can skip site-packages.
        host_path = sys.path
        sys.path = [str(code_dir), *host_path]
        try:
            yield
        finally:
            sys.path = host_path
            for name in [name for name in sys.modules.copy() if provided_here(name)]:
                own_modules[name] = sys.modules.pop(name)
            sys.modules.update(host_modules)

    @contextlib.contextmanager
    def _captured_output(self) -> Iterator[io.StringIO]:
        """Capture this thread's stdout/stderr and root-logger records (the runtime's log handler)."""
        captured = io.StringIO()
        saved = sys.stdout, sys.stderr
        for proxy, current in ((self._stdout, sys.stdout), (self._stderr, sys.stderr)):
            if current is not proxy:
                proxy.fallback = current
            proxy.owner, proxy.buffer_ = threading.get_ident(), captured
        sys.stdout, sys.stderr = self._stdout, self._stderr
        log_handler = logging.StreamHandler(captured)
        log_handler.setFormatter(logging.Formatter("[%(levelname)s]\t%(asctime)s\t%(message)s"))
        invoking_thread = threading.get_ident()  # read here: a filter runs in the thread that logs
        log_handler.addFilter(lambda record: record.thread == invoking_thread)
        logging.getLogger().addHandler(log_handler)
        try:
            yield captured
        finally:
            logging.getLogger().removeHandler(log_handler)
            # Put back what we replaced, unless another thread (pytest's capture, say) has
            # replaced our proxy meanwhile: then its choice stands.
            if sys.stdout is self._stdout:
                sys.stdout = saved[0]
            if sys.stderr is self._stderr:
                sys.stderr = saved[1]
            for proxy in (self._stdout, self._stderr):
                proxy.owner, proxy.buffer_ = None, None


class _ThreadEnvironData(MutableMapping[Any, Any]):
    """Stands in for ``os.environ._data`` (the encoded variables behind ``os.environ``) during an
    invocation: the thread that created it sees `function_data`, every other thread `host_data`."""

    def __init__(self, host_data: MutableMapping[Any, Any], function_data: dict[Any, Any]):
        self.host_data = host_data
        self.function_data = function_data
        self.owner = threading.get_ident()

    def _current(self) -> MutableMapping[Any, Any]:
        return self.function_data if threading.get_ident() == self.owner else self.host_data

    def __getitem__(self, key: Any) -> Any:
        return self._current()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._current()[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._current()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._current()))

    def __len__(self) -> int:
        return len(self._current())


def _host_environment() -> dict[str, str]:
    """A snapshot of this process's environment, taken in one C call (another thread may set a variable meanwhile)."""
    environ = os.environ
    data = environ._data.copy()  # type: ignore[attr-defined]
    return {environ.decodekey(key): environ.decodevalue(value) for key, value in data.items()}  # type: ignore[attr-defined]


@contextlib.contextmanager
def _environ(environment: dict[str, str]) -> Iterator[None]:
    """Make os.environ read as `environment` in this thread for the block; other threads keep the process's.

    The store behind ``os.environ`` is routed, not the ``os.environ`` object replaced: libraries
    keep references to that object (botocore's configuration providers do).
    """
    environ = os.environ
    host_data = environ._data  # type: ignore[attr-defined]
    encode_key, encode_value = environ.encodekey, environ.encodevalue  # type: ignore[attr-defined]
    function_data = {encode_key(name): encode_value(value) for name, value in environment.items()}
    environ._data = _ThreadEnvironData(host_data, function_data)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        environ._data = host_data  # type: ignore[attr-defined]


def _top_level_names(code_dir: Path) -> set[str]:
    """Module and package names a code directory provides at its top level."""
    names = {path.stem for path in code_dir.glob("*.py")}
    names |= {path.name for path in code_dir.iterdir() if path.is_dir() and path.name.isidentifier()}
    return names


def _load_module(unique_name: str, source: Path, package: str) -> ModuleType:
    """Import `source` as module `unique_name`, with `package` for its relative imports."""
    module_spec = importlib.util.spec_from_file_location(unique_name, source)
    module = importlib.util.module_from_spec(module_spec)
    module.__package__ = package
    sys.modules[unique_name] = module
    try:
        module_spec.loader.exec_module(module)
    except ImportError as exc:
        del sys.modules[unique_name]
        raise _FunctionError("Runtime.ImportModuleError", f"Unable to import module '{source.stem}': {exc}") from exc
    except BaseException:
        del sys.modules[unique_name]
        raise
    return module


def _decimal_to_float(value: Any) -> float:
    """JSON fallback the AWS Python runtime uses: Decimals (DynamoDB numbers) become floats."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
