"""`adapters leaderboard | lineage | promote | rollback | evaluate` against a moto registry and a fake serve URL."""

from __future__ import annotations

import json

import boto3
import pytest
from opsctl_testing import BASE, STACK, Deployment, cli, make_champion, seed_adapter, seed_baseline

from mazeops.layout import eval_result_key


@pytest.fixture
def board(deployment: Deployment) -> Deployment:
    """r1-step10 (0.25, former champion), r1-step20 (0.5, champion), r2-step10 (0.75, rejected), r2-step20 (no eval)."""
    seed_adapter(deployment, "r1", 10, solved=16)
    seed_adapter(deployment, "r1", 20, solved=32)
    make_champion(deployment, "r1-step10", "first adapter: solve rate 0.250 meets the minimum 0.200")
    make_champion(deployment, "r1-step20", "challenger is significantly better than the champion (b=16 c=0 p=1.53e-05)")
    seed_adapter(deployment, "r2", 10, status="REJECTED", solved=48)
    seed_adapter(deployment, "r2", 20, status="EVALUATING", solved=None)
    return deployment


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()[1:]]


def test_leaderboard_sorts_by_solve_rate_and_marks_the_champion(board, capsys):
    status, out, _ = cli(capsys, "adapters", "leaderboard", BASE)
    assert status == 0
    assert out.splitlines()[0].split() == [
        "RANK",
        "ADAPTER",
        "RUN",
        "STEP",
        "STATUS",
        "SOLVE_RATE",
        "SOLVED",
        "CHAMPION",
    ]
    assert _rows(out) == [
        ["1", "r2-step10", "r2", "10", "REJECTED", "0.750", "48/64", "-"],
        ["2", "r1-step20", "r1", "20", "CHAMPION", "0.500", "32/64", "*"],
        ["3", "r1-step10", "r1", "10", "RETIRED", "0.250", "16/64", "-"],
        ["4", "r2-step20", "r2", "20", "EVALUATING", "-", "-", "-"],
    ]
    rows = json.loads(cli(capsys, "adapters", "leaderboard", BASE, "--json")[1])
    assert [(row["adapter_name"], row["champion"]) for row in rows][:2] == [("r2-step10", False), ("r1-step20", True)]


def test_leaderboard_of_an_unknown_base_model(board, capsys):
    status, _, err = cli(capsys, "adapters", "leaderboard", "llama-7b")
    assert status == 2 and f"no adapters registered for base model 'llama-7b'; known: {BASE}" in err


def test_lineage_lists_champions_oldest_first_with_evidence(board, capsys):
    status, out, _ = cli(capsys, "adapters", "lineage", BASE)
    lines = out.splitlines()
    assert status == 0 and lines[0] == f"champion of {BASE}: r1-step20 (pointer version 2)"
    assert lines[1].split() == ["#", "ADAPTER", "ROLE", "STATUS", "SOLVE_RATE", "DECISION"]
    assert lines[2].split() == ["1", "baseline", "former", "(not", "evaluated)", "-", "-"]
    assert lines[3].split()[:5] == ["2", "r1-step10", "former", "RETIRED", "0.250"]
    assert lines[3].endswith("first adapter: solve rate 0.250 meets the minimum 0.200")
    assert lines[4].split()[:5] == ["3", "r1-step20", "champion", "CHAMPION", "0.500"]
    assert "b=16 c=0 p=1.53e-05" in lines[4]
    shown = json.loads(cli(capsys, "adapters", "lineage", BASE, "--json")[1])
    assert shown["version"] == 2
    assert shown["lineage"][0] == {"adapter_name": "#BASELINE", "role": "former", "record": None}
    assert shown["lineage"][2]["record"]["decision"]["p_value"] == 0.01


def test_lineage_starts_at_the_baseline_on_the_first_adapters_maze_set(board, capsys):
    seed_baseline(board, solved=4, eval_set_sha256="e" * 64)
    seed_baseline(board, solved=8)
    lines = cli(capsys, "adapters", "lineage", BASE)[1].splitlines()
    assert lines[2].split() == [
        "1",
        "baseline",
        "former",
        "READY",
        "0.125",
        "base",
        "model,",
        "no",
        "adapter:",
        "8/64",
        "on",
        "maze-eval-64",
    ]


def test_before_any_promotion_the_baseline_is_the_champion(deployment, capsys):
    seed_baseline(deployment, solved=12)
    seed_adapter(deployment, "r1", 10, status="REJECTED", solved=14)
    status, out, _ = cli(capsys, "adapters", "lineage", BASE)
    assert status == 0 and out.splitlines()[0] == f"champion of {BASE}: baseline (pointer version 0)"
    assert out.splitlines()[2].split()[:5] == ["1", "baseline", "champion", "READY", "0.188"]
    assert len(out.splitlines()) == 3
    status, out, _ = cli(capsys, "adapters", "leaderboard", BASE)
    assert _rows(out) == [
        ["1", "r1-step10", "r1", "10", "REJECTED", "0.219", "14/64", "-"],
        ["2", "baseline", "-", "-", "READY", "0.188", "12/64", "*"],
    ]


def test_leaderboard_ranks_the_baseline_among_the_adapters(board, capsys):
    seed_baseline(board, solved=20)
    status, out, _ = cli(capsys, "adapters", "leaderboard", BASE)
    assert status == 0
    assert [row[:2] + row[4:] for row in _rows(out)] == [
        ["1", "r2-step10", "REJECTED", "0.750", "48/64", "-"],
        ["2", "r1-step20", "CHAMPION", "0.500", "32/64", "*"],
        ["3", "baseline", "READY", "0.312", "20/64", "-"],
        ["4", "r1-step10", "RETIRED", "0.250", "16/64", "-"],
        ["5", "r2-step20", "EVALUATING", "-", "-", "-"],
    ]
    rows = json.loads(cli(capsys, "adapters", "leaderboard", BASE, "--json")[1])
    baseline = rows[2]
    assert (baseline["adapter_name"], baseline["champion"], baseline["n_solved"], baseline["eval_set_name"]) == (
        "#BASELINE",
        False,
        20,
        "maze-eval-64",
    )


def test_lineage_without_a_champion(deployment, capsys):
    status, _, err = cli(capsys, "adapters", "lineage", BASE)
    assert status == 2 and "has no champion yet" in err


def test_promote_copies_smoke_tests_and_moves_the_pointer(board, capsys):
    status, out, err = cli(capsys, "adapters", "promote", BASE, "r2-step10", "--yes")
    assert (status, err) == (0, "")
    assert out.splitlines()[-1] == f"champion of {BASE}: r1-step20 -> r2-step10 (version 3)"
    serving = board.s3.list_objects_v2(Bucket=board.bucket, Prefix=f"serving/{BASE}/r2-step10/")
    assert sorted(item["Key"].rsplit("/", 1)[1] for item in serving["Contents"]) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert [request["model"] for request in board.head.chat_requests] == [f"{BASE}:r2-step10"]
    registry = board.registry
    assert registry.get_champion(BASE).previous == ["r1-step10", "r1-step20"]
    promoted = registry.get_adapter(BASE, "r2-step10")
    assert promoted.status == "CHAMPION"
    assert promoted.decision["manual"] is True and promoted.decision["champion_solve_rate"] == 0.5
    assert registry.get_adapter(BASE, "r1-step20").status == "RETIRED"


def test_promote_a_retired_adapter_whose_files_are_served_already(board, capsys):
    assert "copied adapter_model.safetensors" in cli(capsys, "adapters", "promote", BASE, "r2-step10", "--yes")[1]
    assert "copied adapter_model.safetensors" in cli(capsys, "adapters", "promote", BASE, "r1-step20", "--yes")[1]
    status, out, _ = cli(capsys, "adapters", "promote", BASE, "r2-step10", "--yes")
    assert status == 0 and "copied" not in out and f"smoke test of {BASE}:r2-step10" in out
    assert board.registry.get_champion(BASE).champion == "r2-step10"


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        ("r9-step10", "unknown adapter 'r9-step10'"),
        ("r1-step20", "r1-step20 is CHAMPION; only EVALUATED, REJECTED, RETIRED adapters can be promoted"),
        ("r2-step20", "r2-step20 is EVALUATING"),
        ("not an adapter", "invalid adapter name"),
    ],
)
def test_promote_refuses_adapters_that_are_not_promotable(board, capsys, adapter, message):
    status, _, err = cli(capsys, "adapters", "promote", BASE, adapter, "--yes")
    assert status == 2 and message in err
    assert board.registry.get_champion(BASE).champion == "r1-step20"
    assert board.head.chat_requests == []


def test_promote_refuses_an_adapter_without_an_eval_result(board, capsys):
    board.s3.delete_object(Bucket=board.bucket, Key=eval_result_key("r2", 10))
    status, _, err = cli(capsys, "adapters", "promote", BASE, "r2-step10", "--yes")
    assert status == 2 and "r2-step10 has no evaluation result" in err
    assert board.registry.get_adapter(BASE, "r2-step10").status == "REJECTED"


def test_promote_refuses_an_adapter_of_a_stopped_run(board, capsys):
    seed_adapter(board, "r3", 10, status="REJECTED", solved=60, run_status="ABORTED")
    status, _, err = cli(capsys, "adapters", "promote", BASE, "r3-step10", "--yes")
    assert status == 2
    assert (
        "r3-step10 cannot be promoted: training run 'r3' is ABORTED; only adapters of RUNNING or SUCCEEDED runs" in err
    )
    assert board.registry.get_champion(BASE).champion == "r1-step20"
    assert board.head.chat_requests == []


def test_promote_refuses_a_result_on_another_maze_set(board, capsys):
    seed_adapter(board, "r3", 10, solved=60, eval_set_sha256="f" * 64)
    status, _, err = cli(capsys, "adapters", "promote", BASE, "r3-step10", "--yes")
    assert status == 2 and "was evaluated on maze set ffffffffffff..., not on the evaluation set" in err
    assert board.registry.get_champion(BASE).champion == "r1-step20"


def test_promote_checks_the_maze_set_the_stack_is_configured_with(board, capsys):
    function = boto3.client("cloudformation").describe_stack_resource(
        StackName=STACK, LogicalResourceId="ValidateRunSpecFunction"
    )["StackResourceDetail"]["PhysicalResourceId"]
    functions = boto3.client("lambda")
    variables = functions.get_function_configuration(FunctionName=function)["Environment"]["Variables"]
    functions.update_function_configuration(
        FunctionName=function, Environment={"Variables": {**variables, "EVAL_SET_SHA256": "d" * 64}}
    )
    status, _, err = cli(capsys, "adapters", "promote", BASE, "r2-step10", "--yes")
    assert status == 2 and "not on the evaluation set dddddddddddd..." in err


def test_promote_refuses_when_the_champion_was_evaluated_on_another_maze_set(board, capsys):
    seed_adapter(board, "r0", 5, solved=40, eval_set_sha256="e" * 64)
    make_champion(board, "r0-step5", "promoted before the maze set changed")
    status, _, err = cli(capsys, "adapters", "promote", BASE, "r2-step10", "--yes")
    assert status == 2 and "champion r0-step5 was evaluated on another maze set" in err
    assert board.registry.get_champion(BASE).champion == "r0-step5"


def test_promote_refuses_adapter_files_that_differ_from_the_manifest(board, capsys):
    key = "runs/r2/adapters/global_step_10/adapter_model.safetensors"
    board.s3.put_object(Bucket=board.bucket, Key=key, Body=b"x" * 256)
    status, _, err = cli(capsys, "adapters", "promote", BASE, "r2-step10", "--yes")
    assert status == 2 and "adapter_model.safetensors changed since it was checked" in err
    assert f"the serving copy s3://{board.bucket}/serving/{BASE}/r2-step10/ was deleted" in err
    assert board.head.chat_requests == []
    served = board.s3.list_objects_v2(Bucket=board.bucket, Prefix=f"serving/{BASE}/r2-step10/")
    assert served["KeyCount"] == 0
    assert board.registry.get_champion(BASE).champion == "r1-step20"


def test_promote_refuses_without_yes_when_stdin_is_not_a_terminal(board, capsys):
    status, _, err = cli(capsys, "adapters", "promote", BASE, "r2-step10")
    assert status == 2 and "refusing without --yes" in err
    assert board.registry.get_champion(BASE).champion == "r1-step20"


def test_promote_stops_when_the_smoke_test_fails(board, capsys):
    board.head.chat_status = 404
    status, _, err = cli(capsys, "adapters", "promote", BASE, "r2-step10", "--yes")
    assert status == 2 and "HTTP 404" in err
    assert board.registry.get_champion(BASE).champion == "r1-step20"
    assert board.registry.get_adapter(BASE, "r2-step10").status == "REJECTED"


def test_promote_refuses_when_the_champion_changes_meanwhile(board, capsys):
    board.head.on_chat = lambda: make_champion(board, "r1-step10", "the pipeline promoted meanwhile")
    status, _, err = cli(capsys, "adapters", "promote", BASE, "r2-step10", "--yes")
    assert status == 2 and "decide again" in err
    assert board.registry.get_champion(BASE).champion == "r1-step10"
    assert board.registry.get_adapter(BASE, "r2-step10").status == "REJECTED"


def test_rollback_restores_the_former_champion_then_the_baseline(board, capsys):
    status, out, _ = cli(capsys, "adapters", "rollback", BASE, "--yes")
    assert status == 0 and out.strip() == f"champion of {BASE}: r1-step20 -> r1-step10 (version 3)"
    assert board.registry.get_adapter(BASE, "r1-step20").status == "ROLLED_BACK"
    status, out, _ = cli(capsys, "adapters", "rollback", BASE, "--yes")
    assert status == 0 and out.strip() == f"champion of {BASE}: r1-step10 -> baseline (version 4)"
    assert board.registry.get_champion(BASE).is_baseline
    status, _, err = cli(capsys, "adapters", "rollback", BASE, "--yes")
    assert (
        status == 2 and f"base model '{BASE}' has no adapter champion to roll back: its baseline is the champion" in err
    )


def test_promote_over_the_baseline_records_it_as_the_champion_it_replaced(deployment, capsys):
    seed_baseline(deployment, solved=12)
    seed_adapter(deployment, "r1", 10, status="REJECTED", solved=14)
    status, out, err = cli(capsys, "adapters", "promote", BASE, "r1-step10", "--yes")
    assert (status, err) == (0, "")
    assert out.splitlines()[-1] == f"champion of {BASE}: baseline -> r1-step10 (version 1)"
    decision = deployment.registry.get_adapter(BASE, "r1-step10").decision
    assert (decision["against"], decision["champion_solve_rate"]) == ("#BASELINE", 12 / 64)


def test_rollback_refuses_without_a_champion_or_without_yes(board, deployment, capsys):
    status, _, err = cli(capsys, "adapters", "rollback", BASE)
    assert status == 2 and "refusing without --yes" in err
    status, _, err = cli(capsys, "adapters", "rollback", "llama-7b", "--yes")
    assert status == 2 and "'llama-7b' has no adapter champion to roll back" in err


# --- evaluate: the next evaluation attempt ----------------------------------------------------------


def _evaluations(deployment: Deployment) -> dict[str, dict]:
    listed = deployment.sfn.list_executions(stateMachineArn=deployment.evaluation_arn)["executions"]
    return {
        e["name"]: json.loads(deployment.sfn.describe_execution(executionArn=e["executionArn"])["input"])
        for e in listed
    }


@pytest.mark.parametrize("adapter", ["r2-step10", "r1-step10"])  # REJECTED, RETIRED (a former champion)
def test_evaluate_starts_the_next_attempt(board, capsys, adapter):
    status, out, _ = cli(capsys, "adapters", "evaluate", BASE, adapter)
    run_id, step = adapter.split("-step")
    name = f"eval-{adapter}-a2"
    assert status == 0 and f"evaluation attempt 2 started as execution {name}" in out
    assert _evaluations(board) == {
        name: {
            "bucket": board.bucket,
            "key": f"runs/{run_id}/adapters/global_step_{step}/manifest.json",
            "run_id": run_id,
            "step": int(step),
            "attempt": 2,
        }
    }


def test_evaluate_after_earlier_attempts_starts_the_one_after(board, capsys):
    board.registry.reopen(BASE, "r2-step10", 2)
    board.registry.set_status(BASE, "r2-step10", "EVAL_FAILED", error="RayUnavailable: head down")
    status, out, _ = cli(capsys, "adapters", "evaluate", BASE, "r2-step10")
    assert status == 0 and "r2-step10 (EVAL_FAILED): evaluation attempt 3 started as execution eval-r2-step10-a3" in out


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        ("r9-step10", "unknown adapter 'r9-step10'"),
        ("r1-step20", "r1-step20 cannot be evaluated again: qwen3-vl-8b-sft:r1-step20 is the champion"),
        ("r2-step20", "r2-step20 cannot be evaluated again: qwen3-vl-8b-sft:r2-step20 is being evaluated now"),
        ("not an adapter", "invalid adapter name"),
    ],
)
def test_evaluate_refuses_the_champion_an_evaluation_in_flight_and_unknown_adapters(board, capsys, adapter, message):
    status, _, err = cli(capsys, "adapters", "evaluate", BASE, adapter)
    assert status == 2 and message in err
    assert _evaluations(board) == {}
    assert board.registry.get_champion(BASE).champion == "r1-step20"


def test_evaluate_refuses_a_registered_adapter(board, capsys):
    board.registry.set_status(BASE, "r2-step10", "REGISTERED")
    status, _, err = cli(capsys, "adapters", "evaluate", BASE, "r2-step10")
    assert status == 2 and "is being registered for serving" in err
    assert _evaluations(board) == {}


def test_evaluate_twice_before_the_attempt_claims_the_row_is_refused(board, capsys):
    assert cli(capsys, "adapters", "evaluate", BASE, "r2-step10")[0] == 0
    status, _, err = cli(capsys, "adapters", "evaluate", BASE, "r2-step10")
    assert status == 2 and "eval-r2-step10-a2 exists already" in err
    assert list(_evaluations(board)) == ["eval-r2-step10-a2"]


def test_evaluate_wait_follows_the_execution_to_its_end(board, capsys):
    status, out, _ = cli(capsys, "adapters", "evaluate", BASE, "r2-step10", "--wait", "--interval", "0.05")
    assert status == 0
    assert "following evaluation execution eval-r2-step10-a2" in out
    assert "execution eval-r2-step10-a2 SUCCEEDED" in out


def test_the_adapters_help_names_evaluate(deployment, capsys):
    with pytest.raises(SystemExit):
        cli(capsys, "adapters", "--help")
    out = capsys.readouterr().out
    assert "evaluate" in out and "adapters evaluate qwen3-vl-8b-sft maze-grpo-1-step40" in out
