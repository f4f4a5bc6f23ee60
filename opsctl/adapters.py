"""`adapters leaderboard | lineage | promote | rollback | evaluate`: the adapter registry and the champion pointer.

The baseline (the base model's own evaluation, no adapter) is the first champion: the leaderboard
ranks it among the adapters, every lineage starts at it, and rolling back the first promoted
adapter returns to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from importlib import resources

from mazeops.adapter_rows import AdapterNotReevaluable, AdapterRecord
from mazeops.baseline import BASELINE
from mazeops.champion_rows import baseline_leads
from mazeops.decision import Decision
from mazeops.evalresult import EvalResult
from mazeops.layout import eval_result_key
from mazeops.manifest import MAX_MANIFEST_BYTES, parse_manifest
from mazeops.names import parse_adapter_name, served_model_id, validate_base_model_id
from mazeops.reevaluation import ReevaluationAlreadyStarted, next_attempt, start_reevaluation
from mazeops.registry import Registry
from mazeops.runs import RunsTable, promotion_block
from mazeops.s3_objects import read_limited
from mazeops.serve_client import load_smoke_image, smoke_test
from mazeops.serving import copy_adapter_to_serving
from opsctl.commands import add_command, add_group
from opsctl.errors import OpsError
from opsctl.follow import add_wait_options, follow_execution
from opsctl.labels import BASELINE_LABEL, champion_label, solved_text
from opsctl.output import print_json, print_table, rate
from opsctl.queries.eval_results import read_eval_result
from opsctl.queries.leaderboard import leaderboard_entries
from opsctl.queries.lineage import champion_lineage
from opsctl.target import Target

PROMOTABLE_STATUSES = ("EVALUATED", "REJECTED", "RETIRED")
LEADERBOARD_COLUMNS = ("RANK", "ADAPTER", "RUN", "STEP", "STATUS", "SOLVE_RATE", "SOLVED", "CHAMPION")
LINEAGE_COLUMNS = ("#", "ADAPTER", "ROLE", "STATUS", "SOLVE_RATE", "DECISION")

EPILOG = """examples:
  mazeops-ops adapters leaderboard qwen3-vl-8b-sft --local
  mazeops-ops adapters lineage qwen3-vl-8b-sft --stack maze-rl-ops
  mazeops-ops adapters promote qwen3-vl-8b-sft maze-grpo-1-step40 --local --yes
  mazeops-ops adapters rollback qwen3-vl-8b-sft --local --yes
  mazeops-ops adapters evaluate qwen3-vl-8b-sft maze-grpo-1-step40 --local --wait
"""
PROMOTE_EPILOG = """Only an adapter in status EVALUATED, REJECTED or RETIRED whose evaluation result is on the
fixed 64-maze set (and the champion's) can be promoted. Its files are copied to serving/<base>/<adapter>/ if missing,
<base>:<adapter> is smoke-tested through the serve URL, then the champion pointer moves
(conditionally on its version, so a concurrent change is refused).

examples:
  mazeops-ops adapters promote qwen3-vl-8b-sft maze-grpo-1-step40 --local
  mazeops-ops adapters promote qwen3-vl-8b-sft maze-grpo-1-step40 --stack maze-rl-ops --yes
"""
EVALUATE_EPILOG = """Starts the adapter's next evaluation attempt: the evaluation execution
eval-<run_id>-step<N>-a<attempt> (attempt 2 on), which evaluates it on the fixed maze set again, records
the result and decides on promotion as a first evaluation does. Only an adapter in status EVAL_FAILED,
EVALUATED, REJECTED, RETIRED or ROLLED_BACK is evaluated again: never the champion, an adapter being
registered (REGISTERED) or one being evaluated (EVALUATING).

examples:
  mazeops-ops adapters evaluate qwen3-vl-8b-sft maze-grpo-1-step40 --local
  mazeops-ops adapters evaluate qwen3-vl-8b-sft maze-grpo-1-step40 --stack maze-rl-ops --wait
"""


def fixed_eval_set_sha256() -> str:
    """The sha256 of the fixed 64-maze evaluation set (`cluster_jobs/maze/eval_set.json`)."""
    return json.loads(resources.files("cluster_jobs.maze").joinpath("eval_set.json").read_text())["sha256"]


def _registry(target: Target) -> Registry:
    return Registry(target.client("dynamodb"), target.registry_table)


def _unknown_base(registry: Registry, base_model_id: str) -> OpsError:
    known = ", ".join(registry.list_base_models()) or "none"
    return OpsError(f"no adapters registered for base model {base_model_id!r}; known: {known}")


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise OpsError("refusing without --yes: stdin is not a terminal")
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise OpsError("cancelled")


def leaderboard(args: argparse.Namespace, target: Target) -> int:
    """Adapters and baselines of a base model sorted by solve rate (unevaluated last), champion marked."""
    registry = _registry(target)
    base = validate_base_model_id(args.base_model_id)
    entries = leaderboard_entries(registry, base)
    if not entries:
        raise _unknown_base(registry, base)
    if args.json:
        print_json([{**entry.document, "champion": entry.champion} for entry in entries])
        return 0
    print_table(
        LEADERBOARD_COLUMNS,
        [
            (
                rank,
                e.name,
                e.run_id,
                e.step,
                e.status,
                rate(e.solve_rate),
                f"{e.n_solved}/{e.n_total}" if e.n_total else None,
                "*" if e.champion else "",
            )
            for rank, e in enumerate(entries, start=1)
        ],
    )
    return 0


def lineage(args: argparse.Namespace, target: Target) -> int:
    """The champion history of a base model from its baseline, oldest first, with solve rates and decision evidence."""
    base = validate_base_model_id(args.base_model_id)
    chain = champion_lineage(_registry(target), base)
    if chain is None:
        raise OpsError(f"base model {base!r} has no champion yet")
    pointer, baseline, baseline_role = chain.pointer, chain.baseline, chain.baseline_role
    names, roles, records = chain.names, chain.roles, chain.records
    version = pointer.version if pointer else 0
    if args.json:
        print_json(
            {
                "base_model_id": base,
                "version": version,
                "lineage": [
                    {
                        "adapter_name": BASELINE,
                        "role": baseline_role,
                        "record": dataclasses.asdict(baseline) if baseline else None,
                    },
                    *(
                        {"adapter_name": name, "role": role, "record": dataclasses.asdict(record) if record else None}
                        for name, role, record in zip(names, roles, records, strict=True)
                    ),
                ],
            }
        )
        return 0
    print(f"champion of {base}: {champion_label(pointer)} (pointer version {version})")
    baseline_row = (
        1,
        BASELINE_LABEL,
        baseline_role,
        baseline.status if baseline else "(not evaluated)",
        rate(baseline.solve_rate) if baseline else None,
        f"base model, no adapter: {solved_text(baseline) or '-'} "
        f"on {baseline.eval_set_name or baseline.eval_set_sha256[:12]}"
        if baseline
        else None,
    )
    print_table(
        LINEAGE_COLUMNS,
        [
            baseline_row,
            *(
                (
                    index,
                    name,
                    role,
                    record.status if record else "(no row)",
                    rate(record.solve_rate) if record else None,
                    (record.decision or {}).get("reason") if record else None,
                )
                for index, (name, role, record) in enumerate(zip(names, roles, records, strict=True), start=2)
            ),
        ],
    )
    return 0


def _eval_result(target: Target, record: AdapterRecord, champion: AdapterRecord | None) -> EvalResult:
    """The adapter's evaluation result; OpsError unless it is on the deployment's maze set and the champion's."""
    key = eval_result_key(record.run_id, record.step)
    result = read_eval_result(target, record.run_id, record.step)
    if result is None:
        raise OpsError(f"{record.adapter_name} has no evaluation result (s3://{target.bucket}/{key})")
    if (result.base_model_id, result.adapter_name) != (record.base_model_id, record.adapter_name):
        raise OpsError(
            f"{key} is the result of {result.base_model_id}:{result.adapter_name}, not of {record.adapter_name}"
        )
    expected = target.lambda_settings.get("EVAL_SET_SHA256") or fixed_eval_set_sha256()
    if result.eval_set_sha256 != expected:
        raise OpsError(
            f"{record.adapter_name} was evaluated on maze set {result.eval_set_sha256[:12]}..., "
            f"not on the evaluation set {expected[:12]}...; evaluate it again first"
        )
    if champion is not None and champion.eval_set_sha256 not in (None, result.eval_set_sha256):
        raise OpsError(
            f"champion {champion.adapter_name} was evaluated on another maze set "
            f"({champion.eval_set_sha256[:12]}...); the two are not comparable"
        )
    return result


def promote(args: argparse.Namespace, target: Target) -> int:
    """Manually make an evaluated adapter the champion, after a serving smoke test."""
    registry = _registry(target)
    base = validate_base_model_id(args.base_model_id)
    run_id, _ = parse_adapter_name(args.adapter)
    record = registry.get_adapter(base, args.adapter)
    if record is None:
        raise OpsError(f"unknown adapter {args.adapter!r} for base model {base!r}")
    if record.status not in PROMOTABLE_STATUSES:
        raise OpsError(
            f"{args.adapter} is {record.status}; only {', '.join(PROMOTABLE_STATUSES)} adapters can be promoted"
        )
    blocked = promotion_block(run_id, RunsTable(target.client("dynamodb"), target.runs_table).get_run(run_id))
    if blocked is not None:
        raise OpsError(f"{args.adapter} cannot be promoted: {blocked}")
    pointer = registry.get_champion(base)
    champion = None if baseline_leads(pointer) else registry.get_adapter(base, pointer.champion)
    result = _eval_result(target, record, champion)
    if baseline_leads(pointer):
        baseline = registry.get_baseline(base, result.eval_set_sha256)
        champion_rate = baseline.solve_rate if baseline is not None and baseline.status == "READY" else None
    else:
        champion_rate = champion.solve_rate if champion else None
    _confirm(
        f"promote {args.adapter} (solve rate {rate(result.solve_rate)}) over champion {champion_label(pointer)} "
        f"(solve rate {rate(champion_rate)}) for {base}?",
        args.yes,
    )

    s3 = target.client("s3")
    manifest = parse_manifest(read_limited(s3, target.bucket, record.manifest_key, MAX_MANIFEST_BYTES))
    serving = copy_adapter_to_serving(s3, target.bucket, manifest, base, args.adapter)
    for name in serving.copied:
        print(f"copied {name} to s3://{target.bucket}/{serving.prefix}")
    model_id = served_model_id(base, args.adapter)
    smoke = smoke_test(target.serve_url, model_id, load_smoke_image())
    print(f"smoke test of {model_id}: {smoke.latency_ms} ms, answer {smoke.answer[:80]!r}")

    registry.set_status(base, args.adapter, "REGISTERED")
    try:
        new = registry.promote(base, args.adapter, expected_version=pointer.version if pointer else 0)
    except Exception:
        # Not promoted (e.g. ChampionChanged): give the adapter back its former status.
        registry.set_status(base, args.adapter, record.status)
        raise
    evidence = {
        "manual": True,
        "against": pointer.champion if pointer else BASELINE,
        "challenger_solve_rate": result.solve_rate,
        "champion_solve_rate": champion_rate,
        "pipeline_reason": (record.decision or {}).get("reason"),
        "serving_prefix": serving.prefix,
    }
    registry.record_decision(base, args.adapter, Decision(True, "manual promotion by an operator", evidence))
    print(f"champion of {base}: {champion_label(pointer)} -> {new.champion} (version {new.version})")
    return 0


def rollback(args: argparse.Namespace, target: Target) -> int:
    """Give the champion role back to the newest former champion, or to the baseline after the first adapter."""
    registry = _registry(target)
    base = validate_base_model_id(args.base_model_id)
    pointer = registry.get_champion(base)
    if baseline_leads(pointer):
        raise OpsError(f"base model {base!r} has no adapter champion to roll back: its baseline is the champion")
    to = pointer.previous[-1] if pointer.previous else f"the {BASELINE_LABEL} (the base model itself)"
    _confirm(f"roll back champion {pointer.champion} of {base} to {to}?", args.yes)
    restored = registry.rollback(base, reason="manual rollback by an operator")
    print(f"champion of {base}: {pointer.champion} -> {champion_label(restored)} (version {restored.version})")
    return 0


def evaluate(args: argparse.Namespace, target: Target) -> int:
    """Evaluate an adapter again (its next attempt); with --wait, follow the evaluation execution."""
    base = validate_base_model_id(args.base_model_id)
    parse_adapter_name(args.adapter)
    record = _registry(target).get_adapter(base, args.adapter)
    if record is None:
        raise OpsError(f"unknown adapter {args.adapter!r} for base model {base!r}")
    try:
        name, _ = start_reevaluation(
            target.client("stepfunctions"), target.state_machines["evaluation"], target.bucket, record
        )
    except (AdapterNotReevaluable, ReevaluationAlreadyStarted) as error:
        raise OpsError(f"{args.adapter} cannot be evaluated again: {error}") from None
    print(f"{args.adapter} ({record.status}): evaluation attempt {next_attempt(record)} started as execution {name}")
    if not args.wait:
        return 0
    status = follow_execution(target, "evaluation", name, name, args.interval, args.progress, args.timeout)
    return 0 if status == "SUCCEEDED" else 1


def register(commands: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    """Add the `adapters` command group."""
    specs = [
        ("leaderboard", leaderboard, "adapters and the baseline by solve rate", EPILOG),
        ("lineage", lineage, "champion history with decision evidence", EPILOG),
        ("promote", promote, "make an evaluated adapter the champion", PROMOTE_EPILOG),
        ("rollback", rollback, "restore the former champion (or the baseline)", EPILOG),
        ("evaluate", evaluate, "evaluate an adapter again (its next attempt)", EVALUATE_EPILOG),
    ]
    subcommands = add_group(
        commands,
        "adapters",
        "leaderboard, champion lineage, manual promotion, rollback and re-evaluation",
        "Inspect the adapter registry, move the champion pointer and evaluate an adapter again.",
        EPILOG,
        [name for name, *_ in specs],
    )
    for name, func, summary, epilog in specs:
        parser = add_command(subcommands, name, func, parents, summary, epilog)
        parser.add_argument("base_model_id", metavar="BASE_MODEL_ID")
        if name in ("promote", "evaluate"):
            parser.add_argument("adapter", metavar="ADAPTER", help="adapter name, <run_id>-step<N>")
        if name in ("leaderboard", "lineage"):
            parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        elif name == "evaluate":
            add_wait_options(parser, "evaluation", "the evaluation")
        else:
            parser.add_argument(
                "--yes", action="store_true", help="do not ask for confirmation (required when stdin is not a terminal)"
            )
