"""LocalStack refuses use before start and cleans up after a failed start.

Kept apart from test_local_stack_stack.py: a start resets the process-wide moto backends.
"""

import os

import pytest

from local_stack import moto_patches
from local_stack.sam_deploy import TemplateError
from local_stack.stack import LocalStack, LocalStackConfig, StackNotRunning


def test_a_stack_that_is_not_running_has_no_endpoint():
    with pytest.raises(StackNotRunning, match="call start"):
        _ = LocalStack(LocalStackConfig()).endpoint_url


def test_a_failed_start_cleans_up(tmp_path):
    moto_port_before = os.environ.get("MOTO_PORT")
    broken = LocalStack(LocalStackConfig(template_path=tmp_path / "missing.yaml", state_dir=tmp_path))

    with pytest.raises(TemplateError, match="cannot read template"):
        broken.start()

    assert moto_patches._originals == {}
    assert os.environ.get("MOTO_PORT") == moto_port_before
    with pytest.raises(StackNotRunning):
        _ = broken.endpoint_url
