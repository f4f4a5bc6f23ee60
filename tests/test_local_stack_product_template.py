"""The product's own template.yaml deploys into the local stack, and a run request starts training."""

import contextlib
import json
import time
from pathlib import Path

import pytest
from template_testing import DESIGN_OUTPUTS

from local_stack.net import free_port
from local_stack.stack import LocalStack, LocalStackConfig

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.skipif(not (REPO / "template.yaml").exists(), reason="template.yaml not written yet")
def test_the_product_template_deploys_and_a_request_starts_training(tmp_path):
    nobody_listens = f"http://127.0.0.1:{free_port()}"
    config = LocalStackConfig(
        template_path=REPO / "template.yaml", state_dir=tmp_path, parameters={"RayAddress": nobody_listens}
    )

    with LocalStack(config) as stack:
        assert set(stack.outputs) >= DESIGN_OUTPUTS
        sfn = stack.session.client("stepfunctions")
        for output in ("TrainingStateMachineArn", "EvaluationStateMachineArn"):
            definition = sfn.describe_state_machine(stateMachineArn=stack.outputs[output])["definition"]
            assert "${" not in json.dumps(json.loads(definition)["States"])

        stack.session.client("s3").put_object(
            Bucket=stack.outputs["ArtifactsBucketName"],
            Key="requests/local-demo.json",
            Body=json.dumps({"base_model_id": "qwen3-vl-8b-sft", "backend": "tiny", "total_steps": 2}),
        )

        arn = stack.outputs["TrainingStateMachineArn"].replace(":stateMachine:", ":execution:") + ":train-local-demo"
        deadline = time.monotonic() + 60
        history: list[str] = []
        while time.monotonic() < deadline and "TaskSucceeded" not in history:
            with contextlib.suppress(sfn.exceptions.ExecutionDoesNotExist):
                history = [event["type"] for event in sfn.get_execution_history(executionArn=arn)["events"]]
            time.sleep(0.5)
        assert "TaskSucceeded" in history  # validate_run_spec ran; the Ray submission then retries
