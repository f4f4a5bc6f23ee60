"""InProcessLambdaRunner: real handler code from a zip, AWS-shaped results and errors, isolation."""

import io
import json
import logging
import os
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from local_stack.lambda_runner import InProcessLambdaRunner, LambdaSpec
from local_stack.thread_output import STDOUT_PROXY

ENDPOINT = "http://127.0.0.1:1"

HANDLER = """
import decimal
import logging
import os
import time

from helpers import shout

CALLS = []


class RayUnavailable(Exception):
    pass


def lambda_handler(event, context):
    CALLS.append(event)
    print(shout("printed"))
    logging.getLogger().warning("logged")
    if event.get("raise"):
        raise RayUnavailable("no head at " + os.environ["RAY_ADDRESS"])
    if event.get("sleep"):
        time.sleep(event["sleep"])
    if event.get("decimal"):
        return {"n": decimal.Decimal("2.5")}
    if event.get("unserializable"):
        return {"s": {1, 2}}
    return {
        "event": event,
        "calls": len(CALLS),
        "env": {name: os.environ.get(name) for name in (
            "RAY_ADDRESS", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION",
            "AWS_ACCESS_KEY_ID", "AWS_LAMBDA_FUNCTION_NAME", "AWS_PROFILE")},
        "context": {
            "function_name": context.function_name,
            "invoked_function_arn": context.invoked_function_arn,
            "memory_limit_in_mb": context.memory_limit_in_mb,
            "aws_request_id": context.aws_request_id,
            "remaining_ms": context.get_remaining_time_in_millis(),
        },
        "started": time.monotonic(),
    }
"""


def make_zip(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def spec(code_zip: bytes, name: str = "fn", handler: str = "app.lambda_handler", **environment: str) -> LambdaSpec:
    return LambdaSpec(
        function_name=name,
        function_arn=f"arn:aws:lambda:eu-west-1:123456789012:function:{name}",
        handler=handler,
        code_zip=code_zip,
        environment={"RAY_ADDRESS": "http://ray:8265", **environment},
        timeout_s=30,
        memory_mb=256,
        region="eu-west-1",
    )


APP_ZIP = make_zip({"app.py": HANDLER, "helpers/__init__.py": "def shout(text):\n    return text.upper()\n"})


@pytest.fixture
def runner(tmp_path: Path) -> InProcessLambdaRunner:
    return InProcessLambdaRunner(tmp_path / "cache", ENDPOINT)


def test_handler_runs_with_the_function_environment_and_context(runner, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "someone-elses")
    environ_before = dict(os.environ)

    result = runner.invoke(spec(APP_ZIP), {"hello": "world"})

    assert not result.errored
    payload = json.loads(result.payload)
    assert payload["event"] == {"hello": "world"}
    assert payload["env"] == {
        "RAY_ADDRESS": "http://ray:8265",
        "AWS_ENDPOINT_URL": ENDPOINT,
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_LAMBDA_FUNCTION_NAME": "fn",
        "AWS_PROFILE": None,
    }
    context = payload["context"]
    assert context["function_name"] == "fn"
    assert context["invoked_function_arn"].endswith(":function:fn")
    assert context["memory_limit_in_mb"] == 256
    assert len(context["aws_request_id"]) == 36
    assert 25_000 < context["remaining_ms"] <= 30_000
    assert dict(os.environ) == environ_before


def test_output_is_captured_as_cloudwatch_style_logs(runner, capsys):
    result = runner.invoke(spec(APP_ZIP), {})

    lines = result.logs.splitlines()
    assert lines[0].startswith("START RequestId: ")
    assert "PRINTED" in lines
    assert any(line.startswith("[WARNING]") and line.endswith("\tlogged") for line in lines)
    assert lines[-2].startswith("END RequestId: ")
    assert lines[-1].startswith("REPORT RequestId: ") and "Duration: " in lines[-1]
    assert "PRINTED" not in capsys.readouterr().out
    assert sys.stdout is not STDOUT_PROXY


def test_an_exception_comes_back_as_an_aws_function_error(runner):
    result = runner.invoke(spec(APP_ZIP), {"raise": True})

    assert result.errored
    error = json.loads(result.payload)
    assert error["errorType"] == "RayUnavailable"
    assert error["errorMessage"] == "no head at http://ray:8265"
    assert len(error["requestId"]) == 36
    assert [frame for frame in error["stackTrace"] if "lambda_runner.py" in frame or "lambda_code.py" in frame] == []
    assert 'app.py", line' in error["stackTrace"][-1]
    assert "[ERROR] RayUnavailable: no head at http://ray:8265" in result.logs


@pytest.mark.parametrize(
    ("handler", "files", "error_type", "message_part"),
    [
        ("missing.lambda_handler", {"app.py": HANDLER}, "Runtime.ImportModuleError", "No module named 'missing'"),
        ("app.nothing_here", {"app.py": "x = 1\n"}, "Runtime.HandlerNotFound", "Handler 'nothing_here' missing"),
        ("app", {"app.py": "x = 1\n"}, "Runtime.MalformedHandlerName", "Bad handler 'app'"),
        (
            "app.lambda_handler",
            {"app.py": "import not_installed_anywhere\n"},
            "Runtime.ImportModuleError",
            "not_installed_anywhere",
        ),
        ("app.lambda_handler", {"app.py": "raise KeyError('at import')\n"}, "KeyError", "at import"),
    ],
)
def test_runtime_failures_are_function_errors(runner, handler, files, error_type, message_part):
    result = runner.invoke(spec(make_zip(files), handler=handler), {})

    assert result.errored
    error = json.loads(result.payload)
    assert error["errorType"] == error_type
    assert message_part in error["errorMessage"]
    assert [frame for frame in error["stackTrace"] if "lambda_runner.py" in frame or "lambda_code.py" in frame] == []


def test_a_corrupt_zip_is_a_function_error(runner):
    result = runner.invoke(spec(b"not a zip"), {})

    assert result.errored
    assert json.loads(result.payload)["errorType"] == "Runtime.ImportModuleError"


def test_results_are_marshalled_like_the_python_runtime(runner):
    decimal_result = runner.invoke(spec(APP_ZIP), {"decimal": True})
    bad_result = runner.invoke(spec(APP_ZIP), {"unserializable": True})

    assert json.loads(decimal_result.payload) == {"n": 2.5}
    assert bad_result.errored
    assert json.loads(bad_result.payload)["errorType"] == "Runtime.MarshalError"


def test_code_is_unpacked_once_and_module_state_is_per_function(runner, tmp_path):
    first = json.loads(runner.invoke(spec(APP_ZIP, name="one"), {}).payload)
    second = json.loads(runner.invoke(spec(APP_ZIP, name="one"), {}).payload)
    other = json.loads(runner.invoke(spec(APP_ZIP, name="two"), {}).payload)

    assert (first["calls"], second["calls"], other["calls"]) == (1, 2, 1)
    assert len([path for path in (tmp_path / "cache").iterdir()]) == 1


def test_same_named_packages_in_different_zips_stay_apart(runner, monkeypatch):
    handler = "from shared import VALUE\n\ndef lambda_handler(event, context):\n    return VALUE\n"
    zip_a = make_zip({"app.py": handler, "shared/__init__.py": "VALUE = 'a'\n"})
    zip_b = make_zip({"app.py": handler, "shared/__init__.py": "VALUE = 'b'\n"})
    host_shared = type(sys)("shared")
    monkeypatch.setitem(sys.modules, "shared", host_shared)

    results = [
        json.loads(runner.invoke(spec(code, name=name), {}).payload)
        for name, code in [("a", zip_a), ("b", zip_b), ("a", zip_a)]
    ]

    assert results == ["a", "b", "a"]
    assert sys.modules["shared"] is host_shared
    assert "helpers" not in sys.modules


def test_an_invocation_never_changes_the_hosts_sys_path_list_in_place(runner, tmp_path):
    """Another thread may be walking the host's sys.path in an import meanwhile (the console tests import
    Playwright while Lambdas run); a list shifted under it can skip site-packages."""
    handler = "import sys\n\ndef lambda_handler(event, context):\n    return [sys.path[0], id(sys.path)]\n"
    host_path, host_entries = sys.path, list(sys.path)

    first, seen_id = json.loads(runner.invoke(spec(make_zip({"app.py": handler}), name="paths"), {}).payload)

    assert first.startswith(str(tmp_path / "cache"))  # the code directory comes first
    assert seen_id != id(host_path)  # the invocation saw a list of its own
    assert sys.path is host_path and sys.path == host_entries


def test_invocations_are_serialized(runner):
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(runner.invoke(spec(APP_ZIP), {"sleep": 0.3}))) for _ in range(2)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    starts = sorted(json.loads(result.payload)["started"] for result in results)
    assert starts[1] - starts[0] >= 0.3
    assert time.monotonic() - started >= 0.6


def test_records_logged_by_other_threads_meanwhile_stay_out_of_the_invocations_logs(runner, tmp_path):
    """The moto server, the console and the test itself log from their own threads while a handler runs."""
    handler = (
        "import logging, os, time\n\n"
        "def lambda_handler(event, context):\n"
        "    open(event['started'], 'w').close()\n"
        "    while not os.path.exists(event['release']):\n"
        "        time.sleep(0.01)\n"
        "    logging.getLogger().warning('logged')\n"
    )
    event = {"started": str(tmp_path / "started"), "release": str(tmp_path / "release")}
    results = []
    invoked = threading.Thread(target=lambda: results.append(runner.invoke(spec(make_zip({"app.py": handler})), event)))
    invoked.start()
    try:
        while invoked.is_alive() and not (tmp_path / "started").exists():  # a handler that never starts ends the wait
            time.sleep(0.01)
        logging.getLogger().warning("from another thread")
    finally:
        (tmp_path / "release").touch()  # never leave the handler waiting
        invoked.join()

    assert "\tlogged" in results[0].logs  # the handler's own record
    assert "from another thread" not in results[0].logs


def test_imports_in_another_thread_meanwhile_never_fail_an_invocation(runner):
    """Other threads import while handlers run (the console tests import Playwright): sys.modules changes size
    under the invocation, which must never iterate it live ('dictionary changed size during iteration' failed a
    ValidateRunSpec task, and with it the console tests' live run)."""
    stop = threading.Event()
    # A process as big as the test suite's, so that a walk over its modules spans several thread switches.
    crowd = {f"_module_of_a_big_process_{index}": sys for index in range(100_000)}
    sys.modules.update(crowd)

    def keep_importing() -> None:
        while not stop.is_set():  # one module more or one less at every pass, where the thread may switch
            if sys.modules.pop("_imported_meanwhile", None) is None:
                sys.modules["_imported_meanwhile"] = sys  # any module object

    importer = threading.Thread(target=keep_importing)
    importer.start()
    try:
        results = [runner.invoke(spec(APP_ZIP), {}) for _ in range(20)]
    finally:
        stop.set()
        importer.join()
        for name in [*crowd, "_imported_meanwhile"]:
            sys.modules.pop(name, None)

    assert [json.loads(result.payload)["errorMessage"] for result in results if result.errored] == []
