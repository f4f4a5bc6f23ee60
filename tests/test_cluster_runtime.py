"""The cluster's runtime (cluster/): its lock resolves for linux x86_64 / CPython 3.12, pins the versions the
runtime is built around, and its overridden pins hold up against the released code; the image is built on
the same Ray, Python and CUDA, and ships the project's cluster code importable.

The resolver dry run needs no GPU: uv resolves again from the cache that `make tools` fills (offline) and
must produce the committed lock byte for byte. Upstream code is read from the locked wheels, which
`make cluster-wheels` downloads and unpacks (tests/cluster_wheels.py), with `ast`, never imported.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import shutil
import subprocess
import sys
from email.parser import Parser
from pathlib import Path

from cluster_wheels import CLUSTER_LOCK, ROOT, locked_version, locked_versions, normalize, unpacked_wheel
from packaging.requirements import Requirement
from static_imports import ImportRef, SourceTree, imports_of

CLUSTER = ROOT / "cluster"
DOCKERFILE = CLUSTER / "Dockerfile"
DOCKERIGNORE = CLUSTER / "Dockerfile.dockerignore"

# The versions the cluster runtime is built around (docs/cluster.md): one each in the lock.
CORE_PINS = {"ray": "2.60.0", "vllm": "0.30.0", "skyrl": "0.4.0", "torch": "2.13.0", "peft": "0.18.1"}

# cluster_jobs' imports whose distribution is named differently from the module.
DISTRIBUTION_OF_IMPORT = {"PIL": "pillow", "yaml": "pyyaml", "skyrl_gym": "skyrl-gym"}
# Imported by cluster_jobs but never on the cluster.
NOT_ON_CLUSTER = {
    "local_stack": "the local stand-in trainer, imported only for `backend: tiny` (cluster_jobs.train.run)",
}
# Where the project's packages live in the repository (pyproject.toml, [tool.pytest.ini_options] pythonpath).
FIRST_PARTY_ROOTS = {"cluster_jobs": ROOT, "mazeops": ROOT / "functions"}


# --- the lock ---------------------------------------------------------------------------------------------


def _requirements(path: Path) -> list[Requirement]:
    """The requirement lines of a requirements file (comments and blank lines skipped)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def test_lock_matches_a_fresh_resolution(tmp_path: Path):
    fresh = tmp_path / "requirements.lock"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    env["UV_OFFLINE"] = "1"  # resolve from the cache `make tools` filled: no network in tests
    result = subprocess.run(
        ["make", "--silent", "--no-print-directory", "cluster-lock", f"CLUSTER_LOCK={fresh}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # Offline, a package missing from the cache fails too: `make tools` fills it from cluster/requirements.in.
    assert result.returncode == 0, f"the cluster lock does not resolve:\n{result.stdout}\n{result.stderr}"
    committed, resolved = CLUSTER_LOCK.read_text(), fresh.read_text()
    diff = list(difflib.unified_diff(committed.splitlines(), resolved.splitlines(), "committed", "resolved", n=1))
    assert committed == resolved, "cluster/requirements.lock is stale: run `make cluster-lock`\n" + "\n".join(diff[:80])


def test_lock_pins_one_version_of_each_core_package():
    versions = locked_versions()
    assert {name: versions.get(name) for name in CORE_PINS} == {name: [v] for name, v in CORE_PINS.items()}
    assert all(len(found) == 1 for found in versions.values())


def test_lock_runs_the_projects_ray():
    assert locked_version("ray") == locked_version("ray", ROOT / "requirements.lock")


def test_every_locked_package_carries_hashes():
    blocks = re.split(r"\n(?=[A-Za-z0-9])", CLUSTER_LOCK.read_text().split("\n", 2)[2])
    unhashed = [block.split()[0] for block in blocks if "--hash=sha256:" not in block]
    assert len(blocks) > 200
    assert unhashed == []  # the image installs with --require-hashes


def test_each_override_replaces_a_conflicting_upstream_pin():
    """An override that no upstream pin contradicts any more is stale and should go."""
    upstream = _requires_dist("skyrl") + _requires_dist("ray")
    for override in _requirements(CLUSTER / "overrides.txt"):
        (pinned,) = [spec.version for spec in override.specifier]
        assert locked_version(override.name) == pinned
        conflicting = [r for r in upstream if r.name == override.name and pinned not in r.specifier]
        assert conflicting, f"no upstream pin conflicts with {override}: drop it from cluster/overrides.txt"


def test_excluded_packages_are_what_skyrl_asks_for_and_absent_from_the_lock():
    excluded = {normalize(r.name) for r in _requirements(CLUSTER / "excludes.txt")}
    skyrl_wants = {normalize(r.name) for r in _requires_dist("skyrl")}
    assert excluded <= skyrl_wants, "an exclusion no longer matches a skyrl requirement"
    assert excluded.isdisjoint(locked_versions())


# --- the upstream code the overrides put together -----------------------------------------------------------


def test_ray_llm_vllm_imports_resolve_in_the_locked_vllm():
    ray = unpacked_wheel("ray")
    refs = imports_of(ray / "ray" / "llm", "vllm", base=ray)
    assert len({(r.module, r.name) for r in refs}) >= 50  # Ray Serve LLM is built on vLLM: not a vacuous scan
    assert [str(ref) for ref in SourceTree(unpacked_wheel("vllm")).unresolved(refs)] == []


def test_skyrl_ray_imports_resolve_in_the_locked_ray():
    skyrl = unpacked_wheel("skyrl")
    refs = imports_of(skyrl / "skyrl", "ray", base=skyrl)
    assert len({(r.module, r.name) for r in refs}) >= 10
    assert [str(ref) for ref in SourceTree(unpacked_wheel("ray")).unresolved(refs)] == []


def _fake_package(root: Path, refs: list[ImportRef]) -> None:
    """Write a package tree that provides exactly the modules and names in `refs` (every module a package)."""
    for ref in refs:
        parts = ref.module.split(".")
        for depth in range(1, len(parts) + 1):
            init = root.joinpath(*parts[:depth], "__init__.py")
            init.parent.mkdir(parents=True, exist_ok=True)
            init.touch()
        if ref.name:
            with root.joinpath(*parts, "__init__.py").open("a") as module:
                module.write(f"{ref.name} = None\n")


def test_the_check_catches_a_missing_vllm_module_and_name(tmp_path: Path):
    ray = unpacked_wheel("ray")
    refs = imports_of(ray / "ray" / "llm", "vllm", base=ray)
    fake = tmp_path / "site-packages"
    _fake_package(fake, refs)
    assert SourceTree(fake).unresolved(refs) == []

    shutil.rmtree(fake / "vllm" / "exceptions")  # ray 2.60 imports vllm.exceptions (vLLM >= 0.26)
    missing = SourceTree(fake).unresolved(refs)
    assert missing and {r.module for r in missing} == {"vllm.exceptions"}

    modules = {r.module for r in refs}
    named = next(r for r in refs if r.name and r.module != "vllm.exceptions" and f"{r.module}.{r.name}" not in modules)
    module_file = fake.joinpath(*named.module.split("."), "__init__.py")
    module_file.write_text(module_file.read_text().replace(f"{named.name} = None\n", ""))
    missing = SourceTree(fake).unresolved(refs)
    assert {(r.module, r.name) for r in missing if r.module == named.module} == {(named.module, named.name)}


def test_the_check_follows_star_reexports_and_lazy_attributes(tmp_path: Path):
    files = {
        "pkg/__init__.py": "from .api import *\nfrom .deep import *\n",
        "pkg/api.py": "__all__ = ['Public']\nPublic = 1\nNotExported = 2\n",
        "pkg/deep.py": "from .deeper import *\n",
        "pkg/deeper.py": "from .deepest import *\nLevelTwo = 1\n_Private = 2\n",
        "pkg/deepest.py": "LevelThree = 1\n",
        "pkg/lazy.py": "import typing\nNAMES = {'Lazy': 'x'}\nif not typing.TYPE_CHECKING:\n"
        "    def __getattr__(name):\n        return NAMES[name]\n",
        "pkg/guarded.py": "try:\n    from os import sep as Sep\nexcept ImportError:\n    Sep = None\n",
        "pkg/_native.cpython-312-x86_64-linux-gnu.so": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    tree = SourceTree(tmp_path)
    found = {
        name: tree.defines(module, name)
        for module, name in [
            ("pkg", "Public"),  # through the star module's __all__
            ("pkg", "NotExported"),  # left out of __all__
            ("pkg", "LevelTwo"),  # two stars down
            ("pkg", "_Private"),  # a star does not export private names
            ("pkg", "LevelThree"),  # three stars down: beyond STAR_DEPTH
            ("pkg.lazy", "Lazy"),  # a module __getattr__ that names it
            ("pkg.lazy", "Absent"),
            ("pkg.guarded", "Sep"),
            ("pkg._native", "anything"),  # an extension module's names cannot be read
        ]
    }
    assert found == {
        "Public": True,
        "NotExported": False,
        "LevelTwo": True,
        "_Private": False,
        "LevelThree": False,
        "Lazy": True,
        "Absent": False,
        "Sep": True,
        "anything": True,
    }
    assert not tree.has_module("pkg.absent")


# --- what the cluster code imports -------------------------------------------------------------------------


def _first_party_file(module: str) -> Path | None:
    parts = module.split(".")
    root = FIRST_PARTY_ROOTS.get(parts[0])
    if root is None:
        return None
    base = root.joinpath(*parts)
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _cluster_imports() -> dict[str, set[str]]:
    """Top-level third-party modules that cluster_jobs and the mazeops modules it reaches import, with where."""
    todo = [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "cluster_jobs").rglob("*.py")]
    seen: set[str] = set()
    third_party: dict[str, set[str]] = {}
    while todo:
        module = todo.pop().removesuffix(".__init__")
        path = _first_party_file(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in FIRST_PARTY_ROOTS:  # the module and the packages above it
                    todo += [".".join(name.split(".")[:depth]) for depth in range(1, name.count(".") + 2)]
                elif top not in sys.stdlib_module_names and top != "__future__":
                    third_party.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return third_party


def test_cluster_code_imports_only_direct_requirements_of_the_image():
    imports = _cluster_imports()
    direct = {normalize(r.name) for r in _requirements(CLUSTER / "requirements.in")}
    needed = {top: normalize(DISTRIBUTION_OF_IMPORT.get(top, top)) for top in imports if top not in NOT_ON_CLUSTER}
    assert {"ray", "skyrl", "torch", "transformers", "vllm"} <= set(needed.values())  # the scan sees the jobs
    missing = {top: sorted(imports[top]) for top, dist in needed.items() if dist not in direct}
    assert missing == {}, "add these to cluster/requirements.in (and DISTRIBUTION_OF_IMPORT if named otherwise)"
    assert set(NOT_ON_CLUSTER) <= set(imports), "NOT_ON_CLUSTER names an import cluster_jobs no longer has"


# --- the image -----------------------------------------------------------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (keyword.upper(), rest.strip())
        for keyword, _, rest in (line.partition(" ") for line in lines if line and not line.startswith("#"))
    ]


def _args() -> dict[str, str]:
    return dict(rest.partition("=")[::2] for keyword, rest in _instructions() if keyword == "ARG")


def _copies() -> list[tuple[str, str]]:
    """(source, destination) of every COPY from the build context."""
    copies = [rest.split() for keyword, rest in _instructions() if keyword == "COPY"]
    assert all(len(parts) == 2 for parts in copies), "COPY with flags or several sources: extend this parser"
    return [(src, dest) for src, dest in copies]


def test_image_base_has_the_locks_ray_python_and_cuda():
    image = _args()["BASE_IMAGE"]
    match = re.fullmatch(r"rayproject/ray:(?P<ray>[\d.]+)-py(?P<py>\d)(?P<minor>\d+)-cu(?P<cuda>\d+)", image)
    assert match, image
    assert match["ray"] == locked_version("ray")
    python = f"{match['py']}.{match['minor']}"
    assert f"--python-version {python} " in (ROOT / "Makefile").read_text()  # the lock's target Python
    cuda_major, cuda_minor = locked_version("cuda-toolkit").split(".")[:2]  # torch's CUDA (its requirement)
    assert match["cuda"] == f"{cuda_major}{cuda_minor}"


def test_image_ray_matches_the_raycluster_manifest():
    manifest = (CLUSTER / "raycluster.yaml").read_text()
    assert re.search(r'^\s*rayVersion:\s*"?([\d.]+)"?', manifest, re.MULTILINE)[1] == locked_version("ray")


def test_image_installs_the_lock_as_it_is_and_builds_skyrls_flash_attn():
    runs = [rest for keyword, rest in _instructions() if keyword == "RUN"]
    (install,) = [run for run in runs if "requirements.lock" in run]
    assert "source=cluster/requirements.lock" in install
    assert {"--no-deps", "--require-hashes"} <= set(install.split())
    (flash_attn,) = [
        r for r in _requires_dist("skyrl") if r.name == "flash-attn" and r.marker and r.marker.evaluate(_SKYRL_TRAIN)
    ]
    (build,) = [run for run in runs if "flash-attn==" in run]
    assert f"flash-attn{flash_attn.specifier} --hash=sha256:" in build
    assert "FLASH_ATTENTION_FORCE_BUILD=TRUE" in build  # else setup.py fetches a CUDA 12 wheel
    assert {"--no-deps", "--no-build-isolation", "--require-hashes"} <= set(build.split())


def test_image_ships_the_cluster_code_importable(tmp_path: Path):
    """Lay the COPYs out in tmp_path; every first-party import of the copied code must resolve there."""
    copies = _copies()
    assert {src.rstrip("/") for src, _ in copies} == {"cluster_jobs", "functions/mazeops"}
    app_roots = {dest.removesuffix("/" + src.rstrip("/")) for src, dest in copies}
    assert len(app_roots) == 1, "the code keeps the repository's layout (cluster_jobs finds functions/ by it)"
    for src, dest in copies:
        shutil.copytree(ROOT / src, tmp_path / dest.lstrip("/"), ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(rest.partition("=")[::2] for keyword, rest in _instructions() if keyword == "ENV")
    path_roots = [tmp_path / entry.lstrip("/") for entry in env["PYTHONPATH"].split(":")]
    for package in FIRST_PARTY_ROOTS:
        homes = [root for root in path_roots if SourceTree(root).has_module(package)]
        assert len(homes) == 1, f"{package} importable from {homes}"
        refs = imports_of(tmp_path, package)
        assert refs and [str(ref) for ref in SourceTree(homes[0]).unresolved(refs)] == []


def test_image_context_holds_only_what_it_copies():
    patterns = [line for line in DOCKERIGNORE.read_text().splitlines() if line and not line.startswith("#")]
    assert patterns[0] == "*"
    included = {line[1:].rstrip("/") for line in patterns if line.startswith("!")}
    bound = set(re.findall(r"--mount=type=bind,source=([^,\s]+)", DOCKERFILE.read_text()))
    assert included == {src.rstrip("/") for src, _ in _copies()} | bound
    secret_like = re.compile(r"SECRET|TOKEN|PASSWORD|CREDENTIAL|ACCESS_KEY|AWS_", re.IGNORECASE)
    declared = [rest.split("=")[0] for keyword, rest in _instructions() if keyword in ("ARG", "ENV")]
    assert [name for name in declared if secret_like.search(name)] == []


# --- reading wheel metadata ----------------------------------------------------------------------------------

# The environment markers of skyrl[fsdp] (which pulls in skyrl-train) on the cluster's platform.
_SKYRL_TRAIN = {"extra": "skyrl-train", "sys_platform": "linux", "platform_machine": "x86_64"}


def _requires_dist(name: str) -> list[Requirement]:
    """The Requires-Dist entries of a locked wheel, extras' included."""
    wheel = unpacked_wheel(name)
    (metadata,) = wheel.glob("*.dist-info/METADATA")
    return [Requirement(line) for line in Parser().parsestr(metadata.read_text()).get_all("Requires-Dist", [])]
