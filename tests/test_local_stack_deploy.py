"""sam_deploy: packaging like `sam package`, offline SAM translation, template errors."""

import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from local_stack.sam_deploy import TemplateError, deterministic_zip, load_template, package_template, translate

MINI_STACK = Path(__file__).parent / "fixtures" / "mini_stack"


class RecordingS3:
    """Stands in for an S3 client: keeps what put_object received."""

    def __init__(self):
        self.objects: dict[tuple[str, str], bytes] = {}

    def put_object(self, Bucket: str, Key: str, Body: bytes) -> dict:
        self.objects[(Bucket, Key)] = Body
        return {}


@pytest.fixture
def stack_copy(tmp_path: Path) -> Path:
    shutil.copytree(MINI_STACK, tmp_path / "stack")
    return tmp_path / "stack"


def test_zip_is_deterministic_and_skips_bytecode(stack_copy):
    functions = stack_copy / "functions"
    first = deterministic_zip(functions)
    (functions / "__pycache__").mkdir(exist_ok=True)
    (functions / "__pycache__" / "router.cpython-311.pyc").write_bytes(b"junk")
    (functions / "stray.pyc").write_bytes(b"junk")

    second = deterministic_zip(functions)

    assert first == second
    names = zipfile.ZipFile(io.BytesIO(first)).namelist()
    assert names == ["minilib/__init__.py", "record_event.py", "router.py", "worker.py"]


def test_package_uploads_code_once_and_inlines_the_definition(stack_copy):
    s3 = RecordingS3()

    template = package_template(stack_copy / "template.yaml", "deploy-bucket", s3)

    [(bucket, key)] = s3.objects
    assert bucket == "deploy-bucket" and key.startswith("code/") and key.endswith(".zip")
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Serverless::Function"]
    assert {r["Properties"]["CodeUri"] for r in functions} == {f"s3://deploy-bucket/{key}"}
    machine = template["Resources"]["MiniStateMachine"]["Properties"]
    assert "DefinitionUri" not in machine
    assert machine["Definition"]["StartAt"] == "Work"
    assert machine["DefinitionSubstitutions"]["WorkerFunctionArn"] == {"Fn::GetAtt": ["WorkerFunction", "Arn"]}


def test_translate_gives_plain_cloudformation(stack_copy):
    template = package_template(stack_copy / "template.yaml", "deploy-bucket", RecordingS3())

    translated = translate(template, {"Greeting": "hi"}, "eu-west-1")

    types = {resource["Type"] for resource in translated["Resources"].values()}
    assert not any(t.startswith("AWS::Serverless::") for t in types)
    assert {"AWS::Lambda::Function", "AWS::StepFunctions::StateMachine", "AWS::Events::Rule"} <= types
    router = translated["Resources"]["RouterFunction"]["Properties"]
    assert router["Code"]["S3Bucket"] == "deploy-bucket"
    assert router["Environment"]["Variables"]["GREETING"] == {"Ref": "Greeting"}
    machine = translated["Resources"]["MiniStateMachine"]["Properties"]
    assert "${WorkerFunctionArn}" in json.dumps(machine["DefinitionString"])
    assert "WorkerFunctionArn" in machine["DefinitionSubstitutions"]


def test_missing_code_directory_is_a_template_error(stack_copy):
    shutil.rmtree(stack_copy / "functions")

    with pytest.raises(TemplateError, match="CodeUri .* is not a directory"):
        package_template(stack_copy / "template.yaml", "deploy-bucket", RecordingS3())


def test_unreadable_definition_is_a_template_error(stack_copy):
    (stack_copy / "statemachine" / "mini.asl.json").write_text("{broken")

    with pytest.raises(TemplateError, match="MiniStateMachine: cannot read DefinitionUri"):
        package_template(stack_copy / "template.yaml", "deploy-bucket", RecordingS3())


@pytest.mark.parametrize("text", ["Resources: [1, 2]\n", "key: [unclosed\n"])
def test_a_template_without_resources_is_refused(tmp_path, text):
    path = tmp_path / "template.yaml"
    path.write_text(text)

    with pytest.raises(TemplateError):
        load_template(path)


def test_sam_errors_become_template_errors(stack_copy):
    template = package_template(stack_copy / "template.yaml", "deploy-bucket", RecordingS3())
    template["Resources"]["RouterFunction"]["Properties"]["Events"]["ObjectCreated"]["Type"] = "NoSuchEvent"

    with pytest.raises(TemplateError, match="SAM translation failed"):
        translate(template, {}, "eu-west-1")
