"""`make bench`: the control plane's overhead, measured in one run on the local stack (a benchmark, not a test).

Parts: Lambda package sizes and handler import times, a burst of adapter manifests against a stub
Ray cluster, and one real adapter from manifest upload to champion. Prints tables and writes
`benchmarks/results/control_plane-<utc>.json` and `latest.json`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.lambda_packages import ImportFailed, measure_lambda_packages
from benchmarks.single_adapter import run_single_adapter
from benchmarks.summaries import StateNotReached, burst_checks
from local_stack.pipeline import PipelineFailed, say
from opsctl.output import print_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
NOTES = [
    "Local stack: moto emulates AWS in one process; Lambda handlers run in-process and one at a time "
    "(a process-wide lock), so Lambda work is serialized here, unlike on AWS.",
    "Single adapter: the base model is the SFT start with a random rank-32 LoRA change subtracted from its "
    "language model; the adapter adds it back, so it solves what the SFT start solves and beats the base "
    "model's baseline by McNemar (no training run). The baseline is evaluated first (mazeops-ops baseline "
    "evaluate), so the adapter's execution compares with a recorded baseline, as every execution after a base "
    "model's first does.",
    "Single adapter: the Ray job's start_time is set when Ray accepts the submission, so the eval job's "
    "duration includes its driver's start-up, model loading and the 64 mazes (tiny model, CPU).",
    "Job end -> promoted includes up to one poll interval (PollSeconds) of waiting; production uses 300 s.",
    "Burst: measures the control plane with a STUB Ray cluster (no model runs); the baseline is recorded "
    "first; every stub result solves 0 of 64 and MinSolveRate is 1, so each evaluation ends Rejected "
    "(no registration, smoke test or promotion).",
    "Lambda packages: one zip of functions/ serves every function (shared CodeUri); what the code imports from "
    "the Lambda runtime or the Powertools layer (boto3, Powertools, pydantic) is not counted. Import times are "
    "on this machine, outside Lambda (Powertools' Tracer is off: no X-Ray patching as at a real cold start).",
    "Timings are from one run on a shared machine; see host.load_average_1m_at_start.",
]


class BenchmarkFailed(RuntimeError):
    """A part of the benchmark did not complete."""


def run_burst_subprocess(state_dir: Path, adapters: int, max_running: int, timeout_s: float) -> dict[str, Any]:
    """Run `python -m benchmarks.burst` in a child process (its own LocalStack) and return its summary."""
    out = state_dir / "burst.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "benchmarks.burst",
        "--out",
        str(out),
        "--state-dir",
        str(state_dir / "burst"),
        "--adapters",
        str(adapters),
        "--max-running",
        str(max_running),
        "--timeout",
        str(timeout_s),
    ]
    child = subprocess.run(command, cwd=ROOT, timeout=timeout_s + 180)
    if child.returncode != 0 or not out.is_file():
        raise BenchmarkFailed(f"the burst exited with {child.returncode}")
    return json.loads(out.read_text())


def print_single_adapter(single: dict[str, Any]) -> None:
    """Table of the single adapter: each phase in seconds and as a ratio of the eval job's duration."""
    print(
        f"one adapter ({single['adapter']}, LoRA rank {single['lora_rank']}, PollSeconds {single['poll_seconds']}): "
        f"execution {single['execution_status']}, Ray job {single['ray_job']['status']}; "
        f"decision: {single['decision']['reason']}; baseline job {single['baseline']['job_s']:.1f} s"
    )
    rows = [
        (phase, f"{seconds:8.2f}", f"{single['ratios_to_eval_job'][phase]:7.3f}")
        for phase, seconds in single["phases_s"].items()
    ]
    rows.append(
        (
            "control-plane overhead (submit + promote)",
            f"{single['control_plane_overhead_s']:8.2f}",
            f"{single['control_plane_overhead_ratio']:7.3f}",
        )
    )
    print_table(("PHASE", "SECONDS", "x EVAL JOB"), rows)
    print("time in each state of the Evaluation execution:")
    print_table(
        ("STATE", "VISITS", "SECONDS"), [(s["state"], s["visits"], f"{s['seconds']:.2f}") for s in single["states"]]
    )


def print_burst(burst: dict[str, Any]) -> None:
    """Tables of the burst: the checks, then the timings."""
    print(
        f"burst of {burst['adapters']} manifests against a STUB Ray cluster (control plane only; K = "
        f"{burst['max_running']} jobs RUNNING at once, {burst['job_seconds']:.0f} s each):"
    )
    print_table(("CHECK", "MEASURED", "VERDICT"), burst_checks(burst))
    for failure in burst["failures"]:
        print(
            f"  {failure['name']} {failure['status']}: {failure['state']} {failure['error']}: {failure['cause'][:160]}"
        )
    print(
        f"manifests uploaded in {burst['manifest_upload_s']:.2f} s; first upload -> last execution end "
        f"{burst['wall_s']:.1f} s; {burst['executions_per_minute']:.1f} executions per minute"
    )
    keys = (
        "put_to_execution_start_s",
        "put_to_job_submitted_s",
        "job_pending_s",
        "job_end_to_execution_end_s",
        "execution_duration_s",
    )
    rows = [
        (key.removesuffix("_s"), *(_seconds(burst[key][stat]) for stat in ("median", "p95", "max"))) for key in keys
    ]
    print_table(("PER ADAPTER (s)", "MEDIAN", "P95", "MAX"), rows)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_lambda_packages(rows: list[dict[str, Any]]) -> None:
    """Table of the Lambda packages."""
    print("Lambda packages (zip of the CodeUri as `sam package` builds it; Powertools layer not counted):")
    print_table(
        ("FUNCTION", "HANDLER", "ZIP KiB", "UNZIPPED KiB", "FILES", "IMPORT s (median of 3)"),
        [
            (
                r["function"],
                r["handler"],
                f"{r['zip_bytes'] / 1024:.1f}",
                f"{r['unzipped_bytes'] / 1024:.1f}",
                r["files"],
                f"{r['import_s_median']:.3f}",
            )
            for r in rows
        ],
    )


def write_results(report: dict[str, Any], results_dir: Path) -> Path:
    """Write the report as control_plane-<utc>.json and latest.json; return the first."""
    results_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=1) + "\n"
    path = results_dir / f"control_plane-{report['started_at'].replace(':', '').replace('-', '')}.json"
    path.write_text(text)
    (results_dir / "latest.json").write_text(text)
    return path


def run(args: argparse.Namespace) -> int:
    """Measure the three parts, print them and write the JSON report."""
    logging.getLogger("moto").setLevel(logging.CRITICAL)
    started = time.monotonic()
    state_dir = args.state_dir.resolve()
    report: dict[str, Any] = {
        "started_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": {
            "cpus": os.cpu_count(),
            "load_average_1m_at_start": os.getloadavg()[0],
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "notes": NOTES,
    }
    say("1/3 Lambda package sizes and handler import times (first, while the machine is quiet)")
    report["lambda_packages"] = measure_lambda_packages(ROOT / "template.yaml", repeats=args.import_repeats)
    say(f"2/3 burst of {args.adapters} manifests against a stub Ray cluster (own local stack, subprocess)")
    report["burst"] = run_burst_subprocess(state_dir, args.adapters, args.max_running, args.burst_timeout)
    say("3/3 one real adapter through the local stack with a real Ray head and Ray Serve")
    report["single_adapter"] = run_single_adapter(state_dir / "single", args.poll_seconds, args.eval_timeout)
    report["total_s"] = time.monotonic() - started

    say("results (measured in this one run)")
    print_single_adapter(report["single_adapter"])
    print()
    print_burst(report["burst"])
    print()
    print_lambda_packages(report["lambda_packages"])
    print()
    for note in NOTES:
        print(f"note: {note}")
    path = write_results(report, args.results_dir)
    say(f"wrote {path} and {path.with_name('latest.json')} (benchmark took {report['total_s']:.0f} s)")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options (the defaults are the benchmark)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.control_plane",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--state-dir", type=Path, default=Path(".local-stack/bench"), help="the stacks' files")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the JSON report goes")
    parser.add_argument("--adapters", type=int, default=100, help="manifests in the burst (default 100)")
    parser.add_argument("--max-running", type=int, default=4, help="stub cluster's concurrent jobs (default 4)")
    parser.add_argument(
        "--poll-seconds", type=int, default=2, help="PollSeconds of the single-adapter stack (default 2)"
    )
    parser.add_argument(
        "--import-repeats", type=int, default=3, help="fresh interpreters per handler import (default 3)"
    )
    parser.add_argument("--burst-timeout", type=float, default=420, help="seconds to wait for the burst (default 420)")
    parser.add_argument(
        "--eval-timeout", type=float, default=600, help="seconds to wait for the evaluation (default 600)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `make bench`."""
    try:
        return run(parse_args(argv))
    except (BenchmarkFailed, PipelineFailed, StateNotReached, ImportFailed) as error:
        print(f"benchmark failed: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
