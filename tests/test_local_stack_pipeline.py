"""`make local`'s verdict: which ends of the pipeline fail it (`local_stack.pipeline.pipeline_failure`)."""

from __future__ import annotations

import pytest

from local_stack.pipeline import pipeline_failure

ALL_SUCCEEDED = {5: "SUCCEEDED", 10: "SUCCEEDED"}


@pytest.mark.parametrize(
    ("trained", "evaluations", "played", "must_promote", "promoted", "expected"),
    [
        (0, ALL_SUCCEEDED, 0, True, True, None),
        (0, ALL_SUCCEEDED, 0, False, False, None),  # random weights: nothing can beat their baseline
        (0, ALL_SUCCEEDED, 0, False, True, None),
        (0, ALL_SUCCEEDED, 0, True, False, "no adapter beat the SFT start's baseline"),
        (1, ALL_SUCCEEDED, 0, True, True, "training exit 1"),
        (0, {5: "SUCCEEDED", 10: "FAILED"}, 0, True, True, "['step 10: FAILED']"),
        (0, {}, 2, False, False, "play exit 2"),
    ],
)
def test_the_pipeline_fails_on_any_failed_step_and_from_the_sft_start_without_a_promotion(
    trained: int, evaluations: dict[int, str], played: int, must_promote: bool, promoted: bool, expected: str | None
) -> None:
    failure = pipeline_failure(trained, evaluations, played, must_promote=must_promote, promoted=promoted)
    if expected is None:
        assert failure is None
    else:
        assert failure is not None and expected in failure
