"""Decide whether the evaluated challenger should replace the champion (an adapter, or the baseline).

The challenger must beat the champion on the same maze set (mazeops.decision); the decision is
stored on its row, and one that is not promoted becomes REJECTED.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.adapter_rows import AdapterNotFound
from mazeops.aws_clients import aws_client
from mazeops.baseline import BASELINE
from mazeops.config import load
from mazeops.decision import Decision, decide
from mazeops.evalresult import InvalidEvalResult
from mazeops.failures import one_line_errors
from mazeops.inputs import adapter_ref
from mazeops.registry import Registry
from mazeops.runs import RunsTable, promotion_block

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="adapter_name")
@tracer.capture_lambda_handler
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Compare the challenger with the current champion; contract in docs/design.md."""
    ref = adapter_ref(event)
    base_model_id, adapter, run_id = ref.base_model_id, ref.adapter_name, ref.run_id
    config = load()
    registry = Registry(aws_client("dynamodb"), config.required("registry_table"))
    challenger = registry.get_adapter(base_model_id, adapter)
    if challenger is None:
        raise AdapterNotFound(f"no registry row for {base_model_id}:{adapter}")
    if not challenger.outcomes or not challenger.eval_set_sha256:
        raise InvalidEvalResult(f"{base_model_id}:{adapter} has no recorded evaluation")
    pointer = registry.get_champion(base_model_id)
    if pointer is not None and pointer.champion == adapter:
        decision = Decision(False, f"{adapter!r} is already the champion", {})
    else:
        against = pointer.champion if pointer else BASELINE
        champion_bits, champion_eval_set = _champion_outcomes(
            registry, base_model_id, challenger.eval_set_sha256, against
        )
        decision = decide(
            challenger.outcomes,
            champion_bits,
            min_solve_rate=config.min_solve_rate,
            alpha=config.mcnemar_alpha,
            same_eval_set=champion_eval_set == challenger.eval_set_sha256,
            against=against,
            run_block=promotion_block(
                run_id, RunsTable(registry.client, config.required("runs_table")).get_run(run_id)
            ),
        )
        registry.record_decision(base_model_id, adapter, decision)
    logger.info("Promotion decided", extra={"promote": decision.promote, "reason": decision.reason})
    return {
        "promote": decision.promote,
        "reason": decision.reason,
        "champion": pointer.champion if pointer else BASELINE,
        "champion_version": pointer.version if pointer else 0,
        "evidence": decision.evidence,
    }


def _champion_outcomes(
    registry: Registry, base_model_id: str, eval_set_sha256: str, against: str
) -> tuple[str | None, str | None]:
    """(outcome bits, eval set sha256) of the champion `against`: for the baseline, its evaluation on `eval_set_sha256`.

    Bits are None when the champion has no recorded outcomes (no row, or a baseline not READY).
    """
    if against == BASELINE:
        baseline = registry.get_baseline(base_model_id, eval_set_sha256)
        if baseline is None or baseline.status != "READY":
            return None, None
        return baseline.outcomes, baseline.eval_set_sha256
    champion = registry.get_adapter(base_model_id, against)
    if champion is None:
        return None, None
    return champion.outcomes, champion.eval_set_sha256
