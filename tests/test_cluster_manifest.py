"""The KubeRay RayCluster manifest, cluster/raycluster.yaml: KubeRay's CRD schema, then the reference topology.

The schema is KubeRay's own (cluster/kuberay/, see its README). Kubernetes validates a custom resource against it
but prunes unknown fields instead of refusing them; `kubectl apply --validate=strict` refuses them. Both are
checked here: the schema made strict (no undeclared field where it lists properties), and every key of the
manifest declared in the schema.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cluster_jobs.serve.llm_app import build_llm_config
from mazeops.jobs import SERVE_GPU_RESOURCE, evaluation_request
from mazeops.runspec import RunSpec

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "cluster" / "raycluster.yaml"
SCHEMA_FILE = ROOT / "cluster" / "kuberay" / "raycluster-v1.schema.json"
KUBERAY_TAG = "v1.7.0"

# What the docs tell an operator to replace (`sed`), and what must exist in the namespace before `kubectl apply`.
IMAGE_PLACEHOLDER = "ACCOUNT_ID.dkr.ecr.REGION.amazonaws.com/maze-rl-ops-ray:TAG"
FSX_CLAIM = "fsx-claim"
SERVICE_ACCOUNT = "maze-rl-ops-ray"

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_GROUP = "gpu-workers"
SERVE_GROUP = "gpu-serve"
CPU_GROUP = "cpu-workers"
# Set by KubeRay on every Ray container when authOptions.mode is token (KubeRay v1.7.0
# ray-operator/controllers/ray/common/pod.go, SetContainerTokenAuthEnvVars), and read by Ray 2.60's token loader.
RAY_AUTH_VARIABLES = {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_K8S_TOKEN_AUTH"}
# KubeRay v1.7.0 ray-operator/controllers/ray/utils/validation.go: token auth needs rayVersion >= 2.52.0; a
# RayCluster name is a DNS-1035 label of at most 53 characters (utils/constant.go MaxRayClusterNameLength).
MIN_TOKEN_AUTH_RAY = (2, 52, 0)
MAX_CLUSTER_NAME = 53
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class Instance:
    """What a node of one instance type offers its pods."""

    cpus: int
    memory_gib: int
    gpus: int


# ml.g7e.12xlarge: sagemaker-hyperpod-cli src/sagemaker/hyperpod/training/constants.py INSTANCE_RESOURCES;
# ml.r5d.16xlarge: Amazon EC2 instance types, memory optimized (R5d: 64 vCPU, 512 GiB).
INSTANCES = {
    "ml.g7e.12xlarge": Instance(cpus=48, memory_gib=512, gpus=2),
    "ml.r5d.16xlarge": Instance(cpus=64, memory_gib=512, gpus=0),
}
GPU_INSTANCE = "ml.g7e.12xlarge"
CPU_INSTANCE = "ml.r5d.16xlarge"

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_SUFFIX = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_SUFFIX.update({"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40})


def quantity(value: int | str) -> float:
    """A Kubernetes resource quantity ("40", 2, "440Gi", "500m") as a number (bytes for memory)."""
    match = _QUANTITY.match(str(value))
    if not match:
        raise ValueError(f"not a quantity this test reads: {value!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


# --- the schema ---------------------------------------------------------------------------------------------


def strict_schema(node: Any) -> Any:
    """KubeRay's structural OpenAPI schema as a JSON Schema that refuses undeclared fields.

    `x-kubernetes-int-or-string` accepts an integer or a string; the other `x-kubernetes-*` keys (list types,
    map types, CEL validations) are dropped; an object that lists properties refuses others, unless it says
    `x-kubernetes-preserve-unknown-fields`.
    """
    if isinstance(node, list):
        return [strict_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict_schema(value) for key, value in node.items() if not key.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    declares = "properties" in node and "additionalProperties" not in node
    if declares and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@cache
def schema_document() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text())


@cache
def validator() -> jsonschema.Draft4Validator:
    schema = strict_schema(schema_document()["openAPIV3Schema"])
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def schema_errors(document: dict[str, Any]) -> list[str]:
    """Every violation of the strict schema, as `path: message`."""
    return [
        f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in validator().iter_errors(document)
    ]


def undeclared_keys(instance: Any, node: dict[str, Any], path: str = "") -> Iterator[str]:
    """Paths of the keys in `instance` that the schema `node` does not declare (what `--validate=strict` refuses).

    An object schema with neither properties nor additionalProperties (the top-level `metadata`, which the API
    server checks as ObjectMeta) declares nothing and is not descended into.
    """
    if isinstance(instance, dict):
        properties = node.get("properties")
        extra = node.get("additionalProperties")
        if properties is None and not isinstance(extra, dict):
            return
        for key, value in instance.items():
            where = f"{path}.{key}" if path else key
            if properties is not None and key in properties:
                yield from undeclared_keys(value, properties[key], where)
            elif isinstance(extra, dict):
                yield from undeclared_keys(value, extra, where)
            else:
                yield where
    elif isinstance(instance, list) and isinstance(node.get("items"), dict):
        for index, item in enumerate(instance):
            yield from undeclared_keys(item, node["items"], f"{path}[{index}]")


# --- the manifest -------------------------------------------------------------------------------------------


@cache
def documents() -> tuple[dict[str, Any], ...]:
    return tuple(doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc is not None)


def cluster() -> dict[str, Any]:
    """A fresh copy of the manifest's one RayCluster."""
    (document,) = documents()
    return copy.deepcopy(document)


@dataclass(frozen=True)
class Group:
    """A head or worker group: its pod template and how many pods KubeRay keeps."""

    name: str
    spec: dict[str, Any]
    pods: int

    @property
    def pod(self) -> dict[str, Any]:
        return self.spec["template"]["spec"]

    @property
    def ray(self) -> dict[str, Any]:
        """The Ray container: KubeRay starts Ray in the first container (utils.RayContainerIndex)."""
        return self.pod["containers"][0]

    def limit(self, resource: str) -> float:
        return quantity(self.ray["resources"]["limits"].get(resource, 0))


def desired_pods(worker_group: dict[str, Any]) -> int:
    """Pods KubeRay keeps for a worker group: replicas held within [min, max], times numOfHosts.

    KubeRay v1.7.0 ray-operator/controllers/ray/utils/util.go, GetWorkerGroupDesiredReplicas (CRD defaults:
    minReplicas 0, numOfHosts 1).
    """
    low, high = worker_group.get("minReplicas", 0), worker_group.get("maxReplicas", 2**31 - 1)
    replicas = worker_group.get("replicas", low)
    return min(max(replicas, low), high) * worker_group.get("numOfHosts", 1)


def groups(document: dict[str, Any]) -> list[Group]:
    spec = document["spec"]
    head = Group("head", spec["headGroupSpec"], 1)
    return [head] + [Group(g["groupName"], g, desired_pods(g)) for g in spec.get("workerGroupSpecs", [])]


def group(name: str) -> Group:
    (found,) = [g for g in groups(cluster()) if g.name == name]
    return found


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return pod.get("initContainers", []) + pod["containers"]


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


# --- KubeRay's schema ---------------------------------------------------------------------------------------


def test_schema_snapshot_names_its_source() -> None:
    source = schema_document()["source"]
    assert source == {
        "repository": "https://github.com/ray-project/kuberay",
        "tag": KUBERAY_TAG,
        "commit": source["commit"],
        "path": "ray-operator/config/crd/bases/ray.io_rayclusters.yaml",
        "version": "v1",
        "license": "Apache-2.0",
    }
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert KUBERAY_TAG in (SCHEMA_FILE.parent / "README.md").read_text()


def test_manifest_is_one_ray_io_v1_raycluster() -> None:
    assert [(doc.get("apiVersion"), doc.get("kind")) for doc in documents()] == [("ray.io/v1", "RayCluster")]


def test_every_document_is_valid_against_kuberays_schema() -> None:
    for document in documents():
        assert schema_errors(document) == []


def test_every_key_of_the_manifest_is_declared_in_the_schema() -> None:
    schema = schema_document()["openAPIV3Schema"]
    for document in documents():
        assert list(undeclared_keys(document, schema)) == []
        # The top-level metadata is ObjectMeta; the manifest uses only these fields of it.
        assert set(document["metadata"]) <= {"name", "namespace", "labels", "annotations"}


def _plant(path: str, value: Any) -> dict[str, Any]:
    """The cluster with `value` at a dotted path (`[n]` indexes a list); the value `...` deletes the key."""
    document = cluster()
    *parents, last = re.findall(r"[^.\[\]]+", path)
    node: Any = document
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return document


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("spec.workerGroupSpecs[0].replicas", "three", "replicas: 'three' is not of type 'integer'"),
        ("spec.enableInTreeAutoscaling", "false", "enableInTreeAutoscaling: 'false' is not of type 'boolean'"),
        ("spec.authOptions.mode", "bearer", "authOptions.mode: 'bearer' is not one of"),
        ("spec.headGroupSpec.rayStartParams.num-gpus", 0, "num-gpus: 0 is not of type 'string'"),
        ("spec.workerGroupSpecs[0].template.spec.containers[0].resources.limits.cpu", [40], "is not valid under any"),
        ("spec.workerGroupSpecs[0].groupName", ..., "'groupName' is a required property"),
        ("spec.headGroupSpec", ..., "'headGroupSpec' is a required property"),
        ("spec.headGroupSpec.template.spec.volumes[0].persistentVolumeClaim.claimName", ..., "'claimName' is a"),
        ("spec.workerGroupSpecs[1].template.spec.containers[0].name", ..., "'name' is a required property"),
        ("spec.headGroupSpec.template.spec.serviceAccount", "x", None),  # declared (deprecated alias): valid
        ("spec.headGroupSpec.template.spec.servicAccountName", "x", "Additional properties are not allowed"),
        ("spec.workerGroupSpecs[0].replica", 3, "Additional properties are not allowed ('replica' was unexpected)"),
        ("spec.authOptions.secret", "x", "Additional properties are not allowed ('secret' was unexpected)"),
    ],
)
def test_schema_validation_catches_planted_violations(path: str, value: Any, expected: str | None) -> None:
    errors = schema_errors(_plant(path, value))
    if expected is None:
        assert errors == []
    else:
        assert any(expected in error for error in errors), errors


def test_undeclared_keys_are_reported_by_path() -> None:
    document = _plant("spec.workerGroupSpecs[0].template.spec.containers[0].imagePullPolicyy", "Always")
    document["spec"]["headGroupSpec"]["serviceTyp"] = "ClusterIP"
    assert list(undeclared_keys(document, schema_document()["openAPIV3Schema"])) == [
        "spec.headGroupSpec.serviceTyp",
        "spec.workerGroupSpecs[0].template.spec.containers[0].imagePullPolicyy",
    ]


def test_int_or_string_quantities_accept_both_forms() -> None:
    document = cluster()
    limits = document["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits["cpu"], limits[GPU_RESOURCE] = 40, "2"
    assert schema_errors(document) == []


# --- the reference topology ---------------------------------------------------------------------------------


def test_cluster_name_is_what_kuberay_accepts() -> None:
    name = cluster()["metadata"]["name"]
    assert len(name) <= MAX_CLUSTER_NAME
    assert DNS_1035_LABEL.match(name)


def test_fixed_topology_without_the_autoscaler() -> None:
    spec = cluster()["spec"]
    assert spec["enableInTreeAutoscaling"] is False
    for worker_group in spec["workerGroupSpecs"]:
        assert worker_group["minReplicas"] == worker_group["replicas"] == worker_group["maxReplicas"] >= 1
    assert [g.name for g in groups(cluster())] == ["head", GPU_GROUP, SERVE_GROUP, CPU_GROUP]


def test_ray_version_is_the_projects_ray() -> None:
    (pin,) = re.findall(r"^ray==([0-9.]+)$", (ROOT / "requirements.lock").read_text(), flags=re.MULTILINE)
    assert cluster()["spec"]["rayVersion"] == pin


def test_token_auth_on_every_pod() -> None:
    document = cluster()
    assert document["spec"]["authOptions"] == {"mode": "token"}
    assert version_tuple(document["spec"]["rayVersion"]) >= MIN_TOKEN_AUTH_RAY
    for g in groups(document):
        # KubeRay adds the token variables to the Ray container (and its wait-gcs-ready init container) only, and
        # only where a container does not set them already.
        assert len(g.pod["containers"]) == 1, g.name
        assert "initContainers" not in g.pod, g.name
        for container in containers(g.pod):
            assert not {env["name"] for env in container.get("env", [])} & RAY_AUTH_VARIABLES, g.name


def test_shared_fsx_claim_at_the_run_specs_shared_dir_on_every_pod() -> None:
    shared_dir = RunSpec.model_fields["shared_dir"].default
    for g in groups(cluster()):
        claims = {
            volume["name"]: volume["persistentVolumeClaim"]["claimName"]
            for volume in g.pod["volumes"]
            if "persistentVolumeClaim" in volume
        }
        mounts = {mount["mountPath"]: mount["name"] for mount in g.ray["volumeMounts"]}
        assert claims.get(mounts.get(shared_dir)) == FSX_CLAIM, g.name


def test_one_image_the_documented_placeholder_on_every_container() -> None:
    images = {container["image"] for g in groups(cluster()) for container in containers(g.pod)}
    assert images == {IMAGE_PLACEHOLDER}


def test_service_account_for_pod_identity_on_every_pod() -> None:
    for g in groups(cluster()):
        assert g.pod["serviceAccountName"] == SERVICE_ACCOUNT, g.name
        assert g.pod.get("automountServiceAccountToken", True) is True, g.name


def test_head_holds_no_gpus_and_exposes_dashboard_and_serve() -> None:
    head = group("head")
    assert head.spec["rayStartParams"]["num-gpus"] == "0"
    assert head.limit(GPU_RESOURCE) == 0
    assert head.spec["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    # KubeRay's head service carries the head container's ports (common/service.go getPortsFromCluster).
    ports = {port["name"]: port["containerPort"] for port in head.ray["ports"]}
    assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "serve": 8000}
    assert head.spec.get("serviceType", "ClusterIP") == "ClusterIP"


def test_gpu_workers_are_the_default_run_specs_gpus() -> None:
    gpu = group(GPU_GROUP)
    gpus_per_pod = gpu.limit(GPU_RESOURCE)
    assert gpus_per_pod == RunSpec.model_fields["gpus_per_node"].default
    assert gpu.pods * gpus_per_pod == RunSpec.model_fields["num_gpus"].default
    assert (gpu.pods, gpus_per_pod) == (3, 2)
    # One pod takes every GPU of its node; KubeRay turns the limit into Ray's num-gpus unless it is set.
    assert gpus_per_pod == INSTANCES[GPU_INSTANCE].gpus
    assert quantity(gpu.ray["resources"]["requests"][GPU_RESOURCE]) == gpus_per_pod
    assert gpu.spec["rayStartParams"].get("num-gpus", str(int(gpus_per_pod))) == str(int(gpus_per_pod))


def test_serving_and_evaluation_gpus_are_set_apart_from_the_trainers() -> None:
    """Only gpu-serve advertises SERVE_GPU_RESOURCE, one per GPU; Serve replicas and vLLM evaluation jobs ask for it."""
    serve = group(SERVE_GROUP)
    gpus = serve.limit(GPU_RESOURCE)
    assert gpus == INSTANCES[GPU_INSTANCE].gpus == 2
    assert serve.spec["resources"] == {GPU_RESOURCE: str(int(gpus)), SERVE_GPU_RESOURCE: str(int(gpus))}
    assert [g.name for g in groups(cluster()) if SERVE_GPU_RESOURCE in g.spec.get("resources", {})] == [SERVE_GROUP]
    llm_config = build_llm_config("qwen3-vl-8b-sft", "/shared/m", "s3://bkt/serving/qwen3-vl-8b-sft")
    assert llm_config["placement_group_config"]["bundles"] == [{"GPU": 1, SERVE_GPU_RESOURCE: 1}]
    # One replica and one evaluation job at a time.
    assert llm_config["deployment_config"]["num_replicas"] == gpus - 1
    job = evaluation_request("eval-r-step20", ["python", "-m", "cluster_jobs.evaluate.run"], {}, "vllm")
    assert (job.entrypoint_num_gpus, job.entrypoint_resources) == (1, {SERVE_GPU_RESOURCE: 1})


def test_gpus_only_on_gpu_nodes() -> None:
    for g in groups(cluster()):
        instance = g.pod["nodeSelector"][INSTANCE_TYPE_LABEL]
        assert instance == (GPU_INSTANCE if g.name in (GPU_GROUP, SERVE_GROUP) else CPU_INSTANCE), g.name
        if g.name not in (GPU_GROUP, SERVE_GROUP):
            assert g.limit(GPU_RESOURCE) == 0, g.name
            assert g.spec["rayStartParams"]["num-gpus"] == "0", g.name


def test_pods_fit_their_nodes() -> None:
    """Guaranteed pods (requests = limits) that fit their instance, the head and cpu-workers on one CPU node."""
    needs: dict[str, list[tuple[float, float]]] = {}
    for g in groups(cluster()):
        resources = g.ray["resources"]
        assert resources["requests"] == resources["limits"], g.name
        instance = INSTANCES[g.pod["nodeSelector"][INSTANCE_TYPE_LABEL]]
        cpu, memory = g.limit("cpu"), g.limit("memory")
        # Room for the kubelet and the node's daemons: at least 4 vCPU and 32 GiB per node.
        assert cpu <= instance.cpus - 4 and memory <= (instance.memory_gib - 32) * 2**30, g.name
        needs.setdefault(g.pod["nodeSelector"][INSTANCE_TYPE_LABEL], []).append((cpu, memory))
    cpu_node = INSTANCES[CPU_INSTANCE]
    assert sum(cpu for cpu, _ in needs[CPU_INSTANCE]) <= cpu_node.cpus - 4
    assert sum(memory for _, memory in needs[CPU_INSTANCE]) <= (cpu_node.memory_gib - 32) * 2**30


def test_dev_shm_holds_the_object_store_with_room_for_nccl_and_vllm() -> None:
    """/dev/shm in memory, larger than Ray's object store by at least 16 GiB, at most half the pod's memory.

    NCCL, vLLM and torch use /dev/shm too; Ray 2.60 refuses to start an object store over 10 GB that /dev/shm
    cannot hold (ray/_private/services.py determine_plasma_store_config).
    """
    for g in groups(cluster()):
        mounts = {mount["mountPath"]: mount["name"] for mount in g.ray["volumeMounts"]}
        (volume,) = [v for v in g.pod["volumes"] if v["name"] == mounts["/dev/shm"]]
        assert volume["emptyDir"]["medium"] == "Memory", g.name
        shm = quantity(volume["emptyDir"]["sizeLimit"])
        object_store = quantity(g.spec["rayStartParams"]["object-store-memory"])
        # A memory-backed emptyDir counts against the container's memory limit.
        assert shm - object_store >= 16 * 2**30 and shm <= g.limit("memory") / 2, g.name


def test_ray_start_params_kuberay_accepts() -> None:
    """KubeRay v1.7.0 utils/validation.go refuses rayStartParams `labels` (the group's `labels` field replaces
    it) and resources set both in rayStartParams and in the group's `resources`."""
    for g in groups(cluster()):
        assert "labels" not in g.spec["rayStartParams"], g.name
        resource_params = {"num-cpus", "num-gpus", "memory", "resources"} & set(g.spec["rayStartParams"])
        assert not (resource_params and g.spec.get("resources")), g.name


def test_the_internal_load_balancer_exposes_only_the_jobs_api_and_serve_of_this_head() -> None:
    (service,) = list(yaml.safe_load_all((ROOT / "cluster" / "ray-endpoints.yaml").read_text()))
    assert (service["apiVersion"], service["kind"], service["spec"]["type"]) == ("v1", "Service", "LoadBalancer")
    annotations = service["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert service["spec"]["selector"] == {"ray.io/cluster": cluster()["metadata"]["name"], "ray.io/node-type": "head"}
    head_ports = {port["name"]: port["containerPort"] for port in group("head").ray["ports"]}
    ports = {port["name"]: (port["port"], port["targetPort"]) for port in service["spec"]["ports"]}
    assert ports == {name: (head_ports[name], head_ports[name]) for name in ("dashboard", "serve")}
    # A placeholder Kubernetes refuses (not a CIDR) until the operator names the functions' subnets.
    (source,) = service["spec"]["loadBalancerSourceRanges"]
    with pytest.raises(ValueError):
        ipaddress.ip_network(source)
