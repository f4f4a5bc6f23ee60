"""Each Lambda function's deployment package size and its handler's import time in a fresh interpreter."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from functools import cache
from io import BytesIO
from pathlib import Path

from local_stack.sam_deploy import deterministic_zip, load_template

IMPORT_PROBE = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"


class ImportFailed(RuntimeError):
    """A handler module could not be imported in a fresh interpreter."""


@dataclass(frozen=True)
class LambdaFunction:
    """One AWS::Serverless::Function of the template."""

    logical_id: str
    handler: str  # module.function
    code_dir: Path

    @property
    def module(self) -> str:
        """The handler's module name."""
        return self.handler.rpartition(".")[0]


@dataclass(frozen=True)
class PackageSize:
    """The deployment zip of one code directory."""

    zip_bytes: int
    unzipped_bytes: int
    files: int


def template_functions(template_path: Path) -> list[LambdaFunction]:
    """The template's functions with their handler and local code directory, in template order."""
    template = load_template(template_path)
    global_code_uri = template.get("Globals", {}).get("Function", {}).get("CodeUri")
    functions = []
    for logical_id, resource in template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        properties = resource.get("Properties", {})
        code_uri = properties.get("CodeUri", global_code_uri)
        functions.append(LambdaFunction(logical_id, properties["Handler"], template_path.parent / code_uri))
    return functions


@cache
def package_size(code_dir: Path) -> PackageSize:
    """Size of the deterministic zip of `code_dir` (computed once per directory)."""
    archive = deterministic_zip(code_dir)
    with zipfile.ZipFile(BytesIO(archive)) as unpacked:
        entries = unpacked.infolist()
    return PackageSize(len(archive), sum(entry.file_size for entry in entries), len(entries))


def import_seconds(module: str, code_dir: Path, repeats: int) -> list[float]:
    """Seconds to import `module`, each in a fresh interpreter with only `code_dir` on PYTHONPATH."""
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    environment["PYTHONPATH"] = str(code_dir)
    times = []
    for _ in range(repeats):
        probe = subprocess.run(
            [sys.executable, "-c", IMPORT_PROBE.format(module=module)],
            env=environment,
            cwd=code_dir,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if probe.returncode != 0:
            raise ImportFailed(f"import {module} failed (exit {probe.returncode}): {probe.stderr.strip()[-1000:]}")
        times.append(float(probe.stdout.strip().splitlines()[-1]))
    return times


def measure_lambda_packages(template_path: Path, repeats: int = 3) -> list[dict[str, object]]:
    """One row per function: logical id, handler, package size and the median import time of `repeats` runs."""
    rows = []
    for function in template_functions(template_path):
        size = package_size(function.code_dir.resolve())
        times = import_seconds(function.module, function.code_dir.resolve(), repeats)
        rows.append(
            {
                "function": function.logical_id,
                "handler": function.handler,
                "code_uri": os.path.relpath(function.code_dir, template_path.parent),
                "zip_bytes": size.zip_bytes,
                "unzipped_bytes": size.unzipped_bytes,
                "files": size.files,
                "import_s_median": statistics.median(times),
                "import_s_runs": times,
            }
        )
    return rows
