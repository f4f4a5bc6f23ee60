"""This stage's caps on training runs, checked when a run spec is accepted: GPUs and steps of one run
(MaxGpusPerRun, MaxStepsPerRun) and runs at once (MaxActiveRuns)."""

from __future__ import annotations

from mazeops.config import RunCaps
from mazeops.runs import RunsTable
from mazeops.runspec import InvalidRunSpec, RunSpec

# How many of the active runs a refusal names.
NAMED_ACTIVE_RUNS = 10


class RunCapExceeded(InvalidRunSpec):
    """The run asks for more than this stage allows (more GPUs or steps, or one run too many at once).

    An InvalidRunSpec, so every path that handles a refused spec (the training state machine's Catch on
    ValidateRunSpec and its failure notification, the ops CLI) handles it alike; its own name tells the
    operator which kind of refusal it was.
    """


def check_spec_caps(spec: RunSpec, caps: RunCaps) -> None:
    """Raise RunCapExceeded naming every cap of `caps` that `spec` exceeds (num_gpus, total_steps)."""
    problems = []
    if caps.max_gpus_per_run is not None and spec.num_gpus > caps.max_gpus_per_run:
        problems.append(f"num_gpus {spec.num_gpus} exceeds this stage's cap MaxGpusPerRun={caps.max_gpus_per_run}")
    if caps.max_steps_per_run is not None and spec.total_steps > caps.max_steps_per_run:
        problems.append(
            f"total_steps {spec.total_steps} exceeds this stage's cap MaxStepsPerRun={caps.max_steps_per_run}"
        )
    if problems:
        raise RunCapExceeded("; ".join(problems))


def check_active_runs(runs: RunsTable, run_id: str, max_active_runs: int | None) -> None:
    """Raise RunCapExceeded if run `run_id` is new and `max_active_runs` other runs are active already.

    A run that already has a row was admitted before (a duplicate event, or a retry of this execution): it is
    never refused here, and it never counts against itself. The count is read when the spec is accepted, so two
    new runs accepted in the same moment may both pass; the cap bounds the steady state, not that race.
    """
    if max_active_runs is None or runs.get_run(run_id) is not None:
        return
    others = [active for active in runs.active_run_ids() if active != run_id]
    if len(others) >= max_active_runs:
        named = ", ".join(others[:NAMED_ACTIVE_RUNS]) + (", ..." if len(others) > NAMED_ACTIVE_RUNS else "")
        raise RunCapExceeded(
            f"{len(others)} runs are active ({named}); this stage's cap MaxActiveRuns={max_active_runs} "
            "allows no more: upload the spec again under a new run id once one of them has finished"
        )
