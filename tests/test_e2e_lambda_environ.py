"""InProcessLambdaRunner and the threads around it: while handlers run, only the invoking thread
sees the function's environment; other threads (Step Functions interpreter, EventBridge
deliveries, test code) keep the process's, and iterating ``os.environ`` never fails.
"""

import io
import os
import threading
import time
import urllib.request
import zipfile
from pathlib import Path

from local_stack.lambda_runner import InProcessLambdaRunner, LambdaSpec

HANDLER = """
import os
import time


def lambda_handler(event, context):
    time.sleep(event["sleep"])
    return {name: os.environ.get(name) for name in ("FUNCTION_ONLY", "AWS_REGION", "AWS_PROFILE")}
"""


def code_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", HANDLER)
    return buffer.getvalue()


def test_other_threads_keep_the_process_environment_while_handlers_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "host-profile")  # a host AWS_* variable the function must not see
    runner = InProcessLambdaRunner(tmp_path / "cache", "http://127.0.0.1:1")
    spec = LambdaSpec(
        function_name="fn",
        function_arn="arn:aws:lambda:eu-west-1:123456789012:function:fn",
        handler="app.lambda_handler",
        code_zip=code_zip(),
        environment={"FUNCTION_ONLY": "yes"},
        timeout_s=30,
        memory_mb=128,
        region="eu-west-1",
    )
    host_environment = dict(os.environ)
    answers: list[str] = []
    done = threading.Event()

    def invoke_many() -> None:
        try:
            for index in range(60):
                answers.append(runner.invoke(spec, {"sleep": 0.005 if index % 2 else 0}).payload)
        finally:
            done.set()

    invoker = threading.Thread(target=invoke_many)
    invoker.start()
    failures: list[str] = []
    reads = 0
    while not done.is_set() or reads == 0:
        try:
            urllib.request.getproxies()  # iterates os.environ, as every botocore client creation does
            seen = os.environ.copy()
        except Exception as error:  # the race this test is about
            failures.append(repr(error))
            continue
        reads += 1
        if seen != host_environment:
            failures.append(f"saw {sorted(set(seen.items()) ^ set(host_environment.items()))[:4]}")
        time.sleep(0)
    invoker.join()

    assert failures == []
    assert len(answers) == 60
    assert set(answers) == {'{"FUNCTION_ONLY": "yes", "AWS_REGION": "eu-west-1", "AWS_PROFILE": null}'}
    assert dict(os.environ) == host_environment
