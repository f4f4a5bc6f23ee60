"""copy_adapter_to_serving: verified server-side copies into the serving prefix, bad copies deleted (moto)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from mazeops_testing import BASE_MODEL, BUCKET, Aws, put_adapter

from mazeops.manifest import AdapterManifest, InvalidManifest
from mazeops.serving import ServingCopy, copy_adapter_to_serving

SOURCE = "runs/run1/adapters/global_step_10/"
SERVED = f"serving/{BASE_MODEL}/run1-step10/"
FILES = ["adapter_config.json", "adapter_model.safetensors"]


@pytest.fixture
def manifest(aws: Aws) -> AdapterManifest:
    return AdapterManifest.model_validate(put_adapter(aws.s3, "run1", 10))


def served(aws: Aws) -> dict[str, bytes]:
    """File name -> bytes of everything below the adapter's serving prefix."""
    listed = aws.s3.list_objects_v2(Bucket=BUCKET, Prefix="serving/").get("Contents", [])
    return {
        item["Key"].removeprefix(SERVED): aws.s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
        for item in listed
    }


def source(aws: Aws, name: str) -> bytes:
    return aws.s3.get_object(Bucket=BUCKET, Key=SOURCE + name)["Body"].read()


def copy(aws: Aws, manifest: AdapterManifest) -> ServingCopy:
    return copy_adapter_to_serving(aws.s3, BUCKET, manifest, BASE_MODEL, "run1-step10")


def test_copies_both_files_byte_for_byte_then_skips_them(aws: Aws, manifest: AdapterManifest) -> None:
    assert copy(aws, manifest) == ServingCopy(prefix=SERVED, copied=tuple(FILES))
    assert served(aws) == {name: source(aws, name) for name in FILES}
    assert copy(aws, manifest) == ServingCopy(prefix=SERVED, copied=())


def test_a_served_file_that_differs_from_the_manifest_is_copied_again(aws: Aws, manifest: AdapterManifest) -> None:
    copy(aws, manifest)
    aws.s3.put_object(Bucket=BUCKET, Key=SERVED + "adapter_model.safetensors", Body=b"stale weights")
    assert copy(aws, manifest).copied == ("adapter_model.safetensors",)
    assert served(aws)["adapter_model.safetensors"] == source(aws, "adapter_model.safetensors")


@pytest.mark.parametrize(
    "tampered",
    [pytest.param(b"x" * 256, id="same-size"), pytest.param(b"swapped weights", id="other-size")],
)
def test_tampered_source_is_refused_and_no_served_copy_is_left(
    aws: Aws, manifest: AdapterManifest, tampered: bytes
) -> None:
    assert manifest.files["adapter_model.safetensors"].size == 256
    aws.s3.put_object(Bucket=BUCKET, Key=SOURCE + "adapter_model.safetensors", Body=tampered)
    with pytest.raises(InvalidManifest) as raised:
        copy(aws, manifest)
    message = str(raised.value)
    assert f"{SOURCE}adapter_model.safetensors changed since it was checked: sha256 " in message
    assert f"and {len(tampered)} bytes, the manifest pins sha256 " in message
    assert message.endswith(f"the serving copy s3://{BUCKET}/{SERVED} was deleted")
    assert served(aws) == {}  # adapter_config.json was copied first, and deleted too


def test_missing_source_file_is_refused_and_no_served_copy_is_left(aws: Aws, manifest: AdapterManifest) -> None:
    aws.s3.delete_object(Bucket=BUCKET, Key=SOURCE + "adapter_model.safetensors")
    with pytest.raises(InvalidManifest, match=f"adapter file {SOURCE}adapter_model.safetensors disappeared"):
        copy(aws, manifest)
    assert served(aws) == {}


@pytest.mark.parametrize(
    ("base_model_id", "adapter"),
    [
        pytest.param("qwen3-vl-2b", "run1-step10", id="other-base"),
        pytest.param(BASE_MODEL, "run1-step20", id="other-adapter"),
    ],
)
def test_manifest_of_another_adapter_is_refused_before_copying(
    aws: Aws, manifest: AdapterManifest, base_model_id: str, adapter: str
) -> None:
    with pytest.raises(
        InvalidManifest, match=f"manifest describes {BASE_MODEL}:run1-step10, not {base_model_id}:{adapter}"
    ):
        copy_adapter_to_serving(aws.s3, BUCKET, manifest, base_model_id, adapter)
    assert served(aws) == {}


def test_a_bad_copy_that_cannot_be_deleted_is_named_in_the_error(aws: Aws, manifest: AdapterManifest) -> None:
    """Without s3:DeleteObject, S3 answers DeleteObjects with one AccessDenied per key."""

    def access_denied(**_: object) -> tuple[SimpleNamespace, dict]:
        errors = [{"Key": SERVED + name, "Code": "AccessDenied", "Message": "Access Denied"} for name in FILES]
        return SimpleNamespace(status_code=200), {"Errors": errors}

    aws.s3.meta.events.register("before-call.s3.DeleteObjects", access_denied)  # this test's client only
    aws.s3.put_object(Bucket=BUCKET, Key=SOURCE + "adapter_model.safetensors", Body=b"x" * 256)
    with pytest.raises(InvalidManifest) as raised:
        copy(aws, manifest)
    assert str(raised.value).endswith(
        f"the bad serving copy could not be deleted ({SERVED}adapter_config.json: AccessDenied, "
        f"{SERVED}adapter_model.safetensors: AccessDenied)"
    )
    assert sorted(served(aws)) == FILES
