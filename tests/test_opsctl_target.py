"""Choosing the deployment: `--stack`, env MAZEOPS_STACK, `--local` (the moto server named in `stack.json`)."""

from __future__ import annotations

import json

import boto3
import pytest
from moto.server import ThreadedMotoServer
from opsctl_testing import BASE, RAY_TOKEN, STACK

from opsctl.cli import main
from opsctl.errors import OpsError
from opsctl.target import local_target, stack_target

OUTPUT_NAMES = (
    "ArtifactsBucketName",
    "RunsTableName",
    "RegistryTableName",
    "TrainingStateMachineArn",
    "EvaluationStateMachineArn",
)


def _run(capsys, *argv):
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_no_deployment_chosen(moto_executing_asl, capsys):
    status, out, err = _run(capsys, "run", "list")
    assert (status, out) == (2, "")
    assert err == "mazeops-ops: error: no deployment chosen: pass --stack NAME or --local, or set MAZEOPS_STACK\n"


def test_the_stack_comes_from_the_environment(deployment, monkeypatch, capsys):
    monkeypatch.setenv("MAZEOPS_STACK", STACK)
    status, out, _ = _run(capsys, "run", "list")
    assert status == 0 and out.splitlines()[0].startswith("RUN_ID")


def test_stack_and_local_exclude_each_other(moto_executing_asl, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "list", "--stack", STACK, "--local"])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_unknown_stack(moto_executing_asl, capsys):
    status, _, err = _run(capsys, "run", "list", "--stack", "nope")
    assert status == 2 and "cannot read stack 'nope' in us-east-1" in err


def test_stack_without_the_needed_outputs(moto_executing_asl, capsys):
    template = {
        "Resources": {"Artifacts": {"Type": "AWS::S3::Bucket"}},
        "Outputs": {"ArtifactsBucketName": {"Value": {"Ref": "Artifacts"}}},
    }
    boto3.client("cloudformation").create_stack(StackName="partial", TemplateBody=json.dumps(template))
    status, _, err = _run(capsys, "run", "list", "--stack", "partial")
    assert status == 2
    missing = "RunsTableName, RegistryTableName, TrainingStateMachineArn, EvaluationStateMachineArn"
    assert f"stack 'partial' lacks the outputs {missing}" in err


def test_no_region_configured(moto_executing_asl, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    status, _, err = _run(capsys, "run", "list", "--stack", STACK)
    assert status == 2 and "no AWS region configured" in err


def test_stack_settings_come_from_its_lambda_environment(deployment, capsys):
    target = stack_target(STACK)
    assert target.base_models == {BASE: "/shared/models/qwen3-vl-8b-sft"}
    assert target.ray_address == target.serve_url == deployment.head.url


def test_ray_jobs_reads_the_token_from_the_stacks_secret_at_each_call(deployment):
    """The CLI needs no stack update after a rotation: it reads the secret named by RayAuthTokenSecretArn."""
    target = stack_target(STACK)
    assert target.ray_auth_token() == RAY_TOKEN
    assert target.ray_jobs().headers == {"Authorization": f"Bearer {RAY_TOKEN}"}
    secrets = boto3.client("secretsmanager")
    secrets.put_secret_value(SecretId=deployment.ray_token_secret_arn, SecretString="rotated-" + "5" * 32)
    assert target.ray_jobs().headers == {"Authorization": "Bearer rotated-" + "5" * 32}


@pytest.mark.parametrize("state", ["never-set", "blank", "deleted"])
def test_unreadable_or_empty_token_secret_is_an_ops_error_naming_it(deployment, state):
    secrets = boto3.client("secretsmanager")
    arn = deployment.ray_token_secret_arn
    if state == "deleted":
        secrets.delete_secret(SecretId=arn, RecoveryWindowInDays=7)  # marked for deletion
        expected = f"cannot read the Ray auth token secret {arn}"
    else:
        # A secret as the stack creates it (no value yet), or one whose current value is blank.
        fresh = secrets.create_secret(Name=f"maze-test-ray-token-{state}")["ARN"]
        if state == "blank":
            secrets.put_secret_value(SecretId=fresh, SecretString=" ")
        arn = fresh
        expected = f"the Ray auth token secret {arn} holds no token"
    target = stack_target(STACK)
    target.outputs["RayAuthTokenSecretArn"] = arn
    with pytest.raises(OpsError) as raised:
        target.ray_jobs()
    assert expected in str(raised.value)


def test_stack_without_the_token_secret_output_is_an_ops_error(deployment):
    target = stack_target(STACK)
    del target.outputs["RayAuthTokenSecretArn"]
    with pytest.raises(OpsError, match="has no RayAuthTokenSecretArn output"):
        target.ray_jobs()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, ".local-stack/stack.json not found: start the local stack first"),
        ("{not json", "cannot read .local-stack/stack.json"),
        (json.dumps({"endpoint_url": "http://127.0.0.1:1"}), "must be a JSON object with an 'outputs' object"),
        (
            json.dumps({"outputs": {}, "endpoint_url": "http://127.0.0.1:1", "region": "us-east-1"}),
            "lacks 'stack_name'",
        ),
        (
            json.dumps({"outputs": {}, "endpoint_url": "http://127.0.0.1:1", "region": "us-east-1", "stack_name": "x"}),
            "lacks the outputs ArtifactsBucketName",
        ),
    ],
)
def test_local_stack_file_problems(moto_executing_asl, monkeypatch, tmp_path, capsys, content, message):
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / ".local-stack").mkdir()
        (tmp_path / ".local-stack" / "stack.json").write_text(content)
    status, _, err = _run(capsys, "run", "list", "--local")
    assert status == 2 and message in err


@pytest.fixture
def moto_server():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_local_reads_stack_json_and_talks_to_its_endpoint(moto_server, monkeypatch, tmp_path, capsys):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.chdir(tmp_path)
    dynamodb = boto3.client(
        "dynamodb",
        endpoint_url=moto_server,
        region_name="eu-west-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    dynamodb.create_table(
        TableName="runs",
        AttributeDefinitions=[{"AttributeName": "run_id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "run_id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.put_item(
        TableName="runs", Item={"run_id": {"S": "local-run"}, "status": {"S": "RUNNING"}, "created_at": {"S": "2026"}}
    )
    (tmp_path / ".local-stack").mkdir()
    document = {
        "endpoint_url": moto_server,
        "region": "eu-west-1",
        "stack_name": "maze-local",
        "outputs": {name: f"arn:aws:states:eu-west-1:123456789012:stateMachine:{name}" for name in OUTPUT_NAMES}
        | {"RunsTableName": "runs"},
        "ray_address": "http://127.0.0.1:8265",
        "serve_url": "http://127.0.0.1:8000/",
    }
    (tmp_path / ".local-stack" / "stack.json").write_text(json.dumps(document))

    target = local_target()
    assert (target.endpoint_url, target.session.region_name, target.stack_name) == (
        moto_server,
        "eu-west-1",
        "maze-local",
    )
    assert (target.ray_address, target.serve_url) == ("http://127.0.0.1:8265", "http://127.0.0.1:8000")
    assert target.base_models is None
    status, out, _ = _run(capsys, "run", "list", "--local")
    assert status == 0 and out.splitlines()[1].split()[:2] == ["local-run", "RUNNING"]
