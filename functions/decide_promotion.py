"""Decide whether the evaluated challenger should replace the champion.

Input `{"base_model_id", "adapter_name"}`; output `{"promote", "reason", "champion",
"champion_version", "evidence"}`. The first adapter of a base model needs MIN_SOLVE_RATE; a
challenger must also beat the champion on the same maze set by an exact one-sided McNemar test
at MCNEMAR_ALPHA (see mazeops.decision). The decision is stored on the challenger's row; a
challenger that is not promoted becomes REJECTED. `champion_version` is what promote_champion
must still find, so a concurrent promotion is detected.
"""

from __future__ import annotations

from typing import Any

import boto3
from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.config import load
from mazeops.decision import Decision, decide
from mazeops.evalresult import InvalidEvalResult
from mazeops.inputs import field
from mazeops.names import parse_adapter_name, validate_base_model_id
from mazeops.registry import AdapterNotFound, Registry

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="adapter_name")
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Compare the challenger with the current champion; see the module docstring."""
    base_model_id = validate_base_model_id(field(event, "base_model_id", str))
    adapter = field(event, "adapter_name", str)
    parse_adapter_name(adapter)
    config = load()
    registry = Registry(boto3.client("dynamodb"), config.required("registry_table"))
    challenger = registry.get_adapter(base_model_id, adapter)
    if challenger is None:
        raise AdapterNotFound(f"no registry row for {base_model_id}:{adapter}")
    if not challenger.outcomes:
        raise InvalidEvalResult(f"{base_model_id}:{adapter} has no recorded evaluation")
    pointer = registry.get_champion(base_model_id)
    champion = registry.get_adapter(base_model_id, pointer.champion) if pointer else None
    if pointer is not None and pointer.champion == adapter:
        decision = Decision(False, f"{adapter!r} is already the champion", {})
    elif pointer is not None and (champion is None or not champion.outcomes):
        decision = Decision(False, f"champion {pointer.champion!r} has no recorded outcomes to compare with", {})
    else:
        decision = decide(
            challenger.outcomes,
            champion.outcomes if champion else None,
            min_solve_rate=config.min_solve_rate,
            alpha=config.mcnemar_alpha,
            same_eval_set=champion is None or champion.eval_set_sha256 == challenger.eval_set_sha256,
        )
    if pointer is None or pointer.champion != adapter:
        registry.record_decision(base_model_id, adapter, decision)
    logger.info("Promotion decided", extra={"promote": decision.promote, "reason": decision.reason})
    return {
        "promote": decision.promote,
        "reason": decision.reason,
        "champion": pointer.champion if pointer else None,
        "champion_version": pointer.version if pointer else 0,
        "evidence": decision.evidence,
    }
