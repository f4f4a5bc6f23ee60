"""Suite-wide settings (set before any test module imports torch) and shared fixtures."""

import copy
import itertools
import os
from typing import Any

import boto3
import pytest
from moto import mock_aws
from template_testing import PARAMETERS, REGION, ROOT

from local_stack.sam_deploy import load_template, package_template, translate
from tests.fixtures_models import one_torch_thread  # noqa: F401 (a fixture, used by name)

# Fixtures every test module may use by name: `aws` (moto with the project's tables and bucket), and the
# ops CLI's `moto_executing_asl`, `fake_head` and `deployment`.
pytest_plugins = ["mazeops_testing", "opsctl_testing"]

# torch's OpenMP threads spin while waiting; on a 2-core CI machine shared by Ray workers that
# slows the tiny-model tests up to 10x (measured: 23 s vs 100-150 s for the 64-maze evaluation).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# The longest modules first: `make test` hands whole modules to two xdist workers in collection
# order, so a long module collected late leaves one worker idle while it runs (the e2e module trains
# for real: about 5 minutes of the suite's 9 on a 2-core machine).
LONGEST_MODULES_FIRST = ("test_e2e_local.py", "test_benchmark_smoke.py", "test_faults_local.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the longest modules to the front, each module's tests in their own order."""
    rank = {name: index for index, name in enumerate(LONGEST_MODULES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # a stable sort


@pytest.fixture(scope="module")
def source() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


@pytest.fixture(scope="module")
def translated(monkeypatch_module: pytest.MonkeyPatch) -> dict[str, Any]:
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="deploy")
        packaged = package_template(ROOT / "template.yaml", "deploy", s3)
    return translate(copy.deepcopy(packaged), PARAMETERS, REGION)


@pytest.fixture(scope="module")
def monkeypatch_module() -> Any:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }.items():
            patch.setenv(name, value)
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        yield patch


_bucket_numbers = itertools.count()


@pytest.fixture(scope="module")
def s3() -> Any:
    """An S3 client of moto's in-process S3, for a module (the serve tests; other modules bring their own)."""
    with pytest.MonkeyPatch.context() as patch, mock_aws():
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        yield boto3.client("s3", region_name="us-east-1")


@pytest.fixture
def bucket(s3: Any) -> str:
    """A fresh, empty bucket of `s3` for this test."""
    name = f"artifacts-{next(_bucket_numbers)}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_calls(s3: Any) -> Any:
    """Names of the S3 operations `s3` calls from the moment the fixture is set up."""
    calls: list[str] = []

    def record(model: Any, **_: Any) -> None:
        calls.append(model.name)

    s3.meta.events.register("before-call.s3", record)
    yield calls
    s3.meta.events.unregister("before-call.s3", record)
