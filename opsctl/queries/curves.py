"""The learning-curve data of runs: fixed-set evaluation results and in-training evals, champion, baselines."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass

from botocore.exceptions import ClientError

from mazeops.baseline_rows import BaselineRecord
from mazeops.champion_rows import ChampionPointer
from mazeops.evalresult import MAX_RESULT_BYTES, parse_eval_result
from mazeops.layout import run_prefix, train_metrics_key
from mazeops.names import adapter_name
from mazeops.registry import Registry
from mazeops.s3_objects import read_limited
from opsctl.target import Target

_RESULT_KEY = re.compile(r"evals/global_step_(?P<step>[1-9][0-9]*)/result\.json$")


@dataclass(frozen=True)
class CurvePoint:
    """One solve rate of one run at one step: from the fixed-set evaluation (`eval`) or the training log (`train`)."""

    run_id: str
    step: int
    source: str
    solve_rate: float
    base_model_id: str | None = None
    n_solved: int | None = None
    n_total: int | None = None
    eval_set_sha256: str | None = None


@dataclass(frozen=True)
class CurveData:
    """What a learning curve shows: per run its fixed-set and in-training points, the champion's points (starred),
    the champion pointer per base model (None: the baseline leads) and the READY baselines on the plotted sets."""

    evals: dict[str, list[CurvePoint]]
    trains: dict[str, list[CurvePoint]]
    starred: list[CurvePoint]
    champions: dict[str, ChampionPointer | None]
    baselines: list[BaselineRecord]


def eval_points(target: Target, run_id: str) -> list[CurvePoint]:
    """The run's fixed-set evaluation results (`runs/<run>/evals/global_step_<N>/result.json`), by step."""
    s3 = target.client("s3")
    prefix = f"{run_prefix(run_id)}evals/"
    points = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=target.bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            if not _RESULT_KEY.search(item["Key"]):
                continue
            result = parse_eval_result(read_limited(s3, target.bucket, item["Key"], MAX_RESULT_BYTES))
            points.append(
                CurvePoint(
                    run_id,
                    result.step,
                    "eval",
                    result.solve_rate,
                    result.base_model_id,
                    result.n_solved,
                    result.n_total,
                    result.eval_set_sha256,
                )
            )
    return sorted(points, key=lambda point: point.step)


def train_points(target: Target, run_id: str) -> list[CurvePoint]:
    """In-training eval solve rates from `runs/<run>/metrics/train.jsonl` (lines with `eval_solve_rate`)."""
    key = train_metrics_key(run_id)
    try:
        body = target.client("s3").get_object(Bucket=target.bucket, Key=key)["Body"].read().decode("utf-8", "replace")
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return []
        raise
    points = []
    for number, line in enumerate(body.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if record.get("eval_solve_rate") is not None:
                points.append(CurvePoint(run_id, int(record["step"]), "train", float(record["eval_solve_rate"])))
        except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
            print(f"note: skipped malformed line {number} of s3://{target.bucket}/{key}", file=sys.stderr)
    return sorted(points, key=lambda point: point.step)


def curve_data(target: Target, run_ids: list[str], base_model_id: str | None = None) -> CurveData:
    """The learning-curve data of `run_ids` (only results of `base_model_id` when given)."""
    evals = {
        run: [p for p in eval_points(target, run) if base_model_id is None or p.base_model_id == base_model_id]
        for run in run_ids
    }
    trains = {run: train_points(target, run) for run in run_ids}
    plotted = [point for points in evals.values() for point in points]
    registry = Registry(target.client("dynamodb"), target.registry_table)
    bases = sorted({point.base_model_id for point in plotted if point.base_model_id})
    champions = {base: registry.get_champion(base) for base in bases}
    names = {base: pointer.champion for base, pointer in champions.items() if pointer}
    starred = [p for p in plotted if names.get(p.base_model_id or "") == adapter_name(p.run_id, p.step)]
    sets = {(point.base_model_id, point.eval_set_sha256) for point in plotted if point.base_model_id}
    baselines = [
        baseline
        for base in bases
        for baseline in registry.list_baselines(base)
        if baseline.status == "READY" and (base, baseline.eval_set_sha256) in sets
    ]
    return CurveData(evals, trains, starred, champions, baselines)
