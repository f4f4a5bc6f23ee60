"""Each control-plane benchmark runs its real code path at a tiny setting, so that none of them can rot unnoticed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import control_plane
from benchmarks.lambda_packages import measure_lambda_packages
from benchmarks.summaries import burst_checks
from mazeops.baseline import BASELINE

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "template.yaml"


def template_function_ids() -> list[str]:
    """Logical ids of the template's AWS::Serverless::Function resources, read from its text."""
    return re.findall(r"^  (\w+):\n    Type: AWS::Serverless::Function$", TEMPLATE.read_text(), flags=re.MULTILINE)


def assert_burst_passed(burst: dict, adapters: int) -> None:
    """Every check of the burst met, for `adapters` manifests and one baseline job."""
    assert (burst["adapters"], burst["executions"], burst["baseline_jobs"]) == (adapters, adapters, 1), burst
    assert burst["execution_statuses"] == {"SUCCEEDED": adapters}, burst["failures"]
    assert [verdict for _, _, verdict in burst_checks(burst)] == ["ok", "ok", "ok", "info", "ok"]


def test_lambda_packages_measures_every_function_of_the_template() -> None:
    rows = measure_lambda_packages(TEMPLATE, repeats=1)

    assert [row["function"] for row in rows] == template_function_ids()
    assert len(rows) >= 10
    for row in rows:
        assert 0 < row["zip_bytes"] < row["unzipped_bytes"], row
        assert row["files"] > 0 and len(row["import_s_runs"]) == 1 and row["import_s_median"] > 0, row


@pytest.mark.slow
def test_the_whole_benchmark_at_its_smallest_promotes_the_single_adapter(tmp_path: Path) -> None:
    results = tmp_path / "results"
    argv = [
        "--state-dir",
        str(tmp_path / "state"),
        "--results-dir",
        str(results),
        "--adapters",
        "2",
        "--max-running",
        "1",
        "--import-repeats",
        "1",
        "--poll-seconds",
        "1",
    ]

    assert control_plane.main(argv) == 0

    report = json.loads((results / "latest.json").read_text())
    assert [row["function"] for row in report["lambda_packages"]] == template_function_ids()
    assert_burst_passed(report["burst"], adapters=2)
    single = report["single_adapter"]
    assert (single["execution_status"], single["ray_job"]["status"]) == ("SUCCEEDED", "SUCCEEDED")
    assert single["decision"]["promote"] is True, single["decision"]
    assert single["decision"]["against"] == BASELINE
    assert [state["state"] for state in single["states"]][-3:] == ["PromoteChampion", "NotifyPromoted", "Promoted"]
    phases = single["phases_s"]
    assert 0 < phases["manifest_put_to_ray_job_submitted"] < phases["manifest_put_to_execution_end"]
    assert phases["eval_job"] > 0 and phases["job_end_to_champion_promoted"] > 0
    assert single["baseline"]["job_s"] > 0
