"""What a platform team runs before `sam deploy`: `sam validate --lint`, `sam build` (no Docker) and
checkov on template.yaml, with the pinned tools of `make tools` (.venv-sam, .venv-checkov).

Every checkov finding is fixed in the template or skipped there, inline, with a reason; this
test prints the counts and fails on any failed check or any skip without a reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from local_stack.sam_deploy import load_template

ROOT = Path(__file__).resolve().parent.parent
SAM = ROOT / ".venv-sam" / "bin" / "sam"
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
OFFLINE = {"SAM_CLI_TELEMETRY": "0", "BC_SKIP_MAPPING": "TRUE"}


def tool(path: Path) -> Path:
    """The tool's executable; outside CI a missing tool venv skips (CI must have it: `make test` builds it)."""
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing: `make tools` should have installed it")
        pytest.skip(f"{path} is missing: run `make tools`")
    return path


def run(*command: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run a tool to completion, offline, and return what it printed."""
    return subprocess.run(
        [str(part) for part in command],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **OFFLINE},
    )


def test_sam_validate_with_lint_accepts_the_template() -> None:
    result = run(tool(SAM), "validate", "--lint", "--template-file", "template.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr


def test_sam_build_packages_every_function_without_docker(tmp_path: Path) -> None:
    build_dir = tmp_path / "build"
    result = run(
        tool(SAM),
        "build",
        "--template-file",
        "template.yaml",
        "--build-dir",
        build_dir,
        "--cache-dir",
        tmp_path / "cache",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    built = load_template(build_dir / "template.yaml")["Resources"]
    functions = {name: r["Properties"] for name, r in built.items() if r["Type"] == "AWS::Serverless::Function"}
    assert len(functions) == 16
    for name, properties in functions.items():
        code = build_dir / properties["CodeUri"]
        assert (code / f"{properties['Handler'].split('.')[0]}.py").is_file(), name
        assert (code / "mazeops" / "registry.py").is_file(), name


def test_checkov_finds_no_failed_check_and_every_skip_has_a_reason(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(
        tool(CHECKOV),
        "--file",
        "template.yaml",
        "--framework",
        "cloudformation",
        "--skip-download",
        "--output",
        "json",
    )
    report = json.loads(result.stdout)
    summary = report["summary"]
    with capsys.disabled():  # shown in every run, CI's included
        print(
            f"\ncheckov {summary['checkov_version']} on template.yaml: {summary['passed']} passed checks, "
            f"{summary['failed']} failed checks, {summary['skipped']} skipped checks (reasons in the template)"
        )
    failed = [f"{c['check_id']} {c['resource']}" for c in report["results"]["failed_checks"]]
    assert summary["failed"] == 0 and not failed, failed
    assert summary["passed"] >= 100 and summary["parsing_errors"] == 0
    unexplained = [
        f"{c['check_id']} {c['resource']}"
        for c in report["results"]["skipped_checks"]
        if len(c["check_result"].get("suppress_comment", "").split()) < 5
    ]
    assert not unexplained
