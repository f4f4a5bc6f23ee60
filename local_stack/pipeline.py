"""`make local`: the whole pipeline on the embedded local stack, end to end, printed step by step.

Trains a tiny run from the SFT start (random weights without one), evaluates and promotes its adapters, and has the
champion play a held-out maze live. Exit code 0 when every step succeeded and, from the SFT start, an adapter beat
the baseline; the last line says which.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from cluster_jobs.maze.eval_set import eval_set_for_size
from local_stack.cluster_standins.sft_start import SftCheckpointMismatch, verify_checkpoint
from local_stack.cluster_standins.tiny_model import LANGUAGE_MODEL_LORA_TARGETS, build_tiny_qwen3_vl
from local_stack.stack import LocalStack, LocalStackConfig
from mazeops import layout, names
from mazeops.champion_rows import baseline_leads
from mazeops.registry import Registry
from mazeops.runs import RunsTable
from opsconsole.server import ConsoleServer
from opsctl import cli
from opsctl.follow import follow_execution
from opsctl.target import Target, local_target

BASE_MODEL_ID = "tiny-qwen3-vl"
BASE_MODEL_DIR = Path(__file__).parent / "cluster_standins" / "models" / "tiny-qwen3-vl-maze7"
MAZE_SIZE = 7
PLAY_SEED = 0  # the held-out maze the champion plays live
SERVE_JOB_ID = "serve-local-app"
WATCH_INTERVAL_S = 20.0  # `make local` fires the cluster watch this often (every 5 minutes on AWS)


class PipelineFailed(RuntimeError):
    """A step of the local pipeline did not succeed."""


def tiny_run_spec(steps: int, ckpt_interval: int, shared_dir: Path) -> dict:
    """The local run: GRPO from the SFT start on 7x7 mazes, the reference recipe's shape scaled to 2 CPU cores.

    As the recipe: group-normalized advantages over 8 samples per maze, clipped ratio, LoRA rank 32,
    the evaluation's turn budget. Unlike it: 16 mazes a step in two mini-batches, two passes over
    each step's rollouts, the KL term to the SFT start (x 0.05), the LoRA on the language model
    only, and a learning rate for a toy model (a tiny LoRA moves little at the 8B recipe's 1e-6).
    Chosen, seed included, by GRPO sweeps (research/RESULTS.md): with this setting a run either keeps
    the start's greedy play or jumps, and which depends on the seed.
    """
    return {
        "base_model_id": BASE_MODEL_ID,
        "backend": "tiny",
        "seed": 0,
        "total_steps": steps,
        "ckpt_interval": ckpt_interval,
        "eval_interval": steps,
        "train_batch_size": 16,
        "policy_mini_batch_size": 8,
        "update_epochs_per_batch": 2,
        "n_samples_per_prompt": 8,
        "learning_rate": 1.5e-3,
        "use_kl_loss": True,
        "kl_loss_coef": 0.05,
        "lora": {"target_modules": LANGUAGE_MODEL_LORA_TARGETS},
        "temperature": 1.0,
        "max_turns": eval_set_for_size(MAZE_SIZE).max_turns,
        "maze": {"size": MAZE_SIZE, "train_mazes": 1000},
        "num_gpus": 1,
        "shared_dir": str(shared_dir),
    }


def stack_parameters(base_model_path: Path, poll_seconds: int) -> dict[str, str]:
    """Template parameters for the local stack (see docs/local-stack.md for why each differs from prod)."""
    return {
        "Stage": "local",
        "BaseModels": json.dumps({BASE_MODEL_ID: str(base_model_path)}),
        # The floor every champion must reach besides beating the current one by McNemar: the lower
        # edge of the SFT start's band (the template's default, 0.5, is the 8B's).
        "MinSolveRate": "0.3",
        "EvalBackend": "transformers",
        "PollSeconds": str(poll_seconds),
        "EvalSetSha256": eval_set_for_size(MAZE_SIZE).sha256,
        # The cluster watch's outage handling at a local pace: notify after a minute unreachable, retry a failed
        # evaluation 5 s after its failure (doubling per attempt), where the template waits 15 minutes and 300 s.
        "ClusterUnreachableMinutes": "1",
        "EvalRetryBackoffSeconds": "5",
    }


def say(message: str) -> None:
    """One progress line."""
    print(f"==> {message}", flush=True)


def deploy_serve_app(stack: LocalStack, base_model_path: Path, timeout_s: float = 600.0) -> str:
    """Deploy the local Ray Serve app through a Ray job, as an operator would on the cluster."""
    jobs = stack.ray_jobs()
    port = stack.serve_url.rsplit(":", 1)[1] if stack.serve_url else "8000"
    entrypoint = (
        f"{sys.executable} -m local_stack.cluster_standins.serve_app --base-model-id {BASE_MODEL_ID} "
        f"--base-model-path {base_model_path} --bucket {stack.outputs['ArtifactsBucketName']} "
        f"--prefix {layout.serving_prefix(BASE_MODEL_ID)} --port {port}"
    )
    jobs.submit(SERVE_JOB_ID, entrypoint, metadata={"kind": "serve"})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = jobs.get(SERVE_JOB_ID)
        if job.terminal:
            if job.status != "SUCCEEDED":
                raise PipelineFailed(f"Serve deployment job {job.status}: {jobs.logs_tail(SERVE_JOB_ID)[-2000:]}")
            return stack.serve_url or ""
        time.sleep(2)
    raise PipelineFailed(f"Serve deployment job still running after {timeout_s:.0f} s")


def follow_evaluations(target: Target, run_id: str, steps: list[int], timeout_s: float) -> dict[int, str]:
    """Follow each adapter's Evaluation execution to its end; return step -> final status."""
    statuses = {}
    for step in steps:
        name = names.eval_job_id(run_id, step)
        statuses[step] = follow_execution(
            target, "evaluation", name, name, interval_s=2, progress_s=30, timeout_s=timeout_s
        )
    return statuses


def print_decisions(target: Target, run_id: str) -> None:
    """Each adapter of the run: its status and the decision's reason (McNemar's b, c and p against the champion)."""
    for record in Registry(target.client("dynamodb"), target.registry_table).list_adapters(BASE_MODEL_ID):
        if record.run_id == run_id:
            reason = (record.decision or {}).get("reason", record.error or "no decision")
            print(f"  {record.adapter_name}: {record.status}, {record.n_solved}/{record.n_total}: {reason}")


def has_manifest(target: Target, run_id: str, step: int) -> bool:
    """Whether the adapter of ``step`` was uploaded (its manifest, written last, is in S3)."""
    listed = target.client("s3").list_objects_v2(Bucket=target.bucket, Prefix=layout.adapter_manifest_key(run_id, step))
    return listed.get("KeyCount", 0) > 0


def print_s3_keys(target: Target, run_id: str) -> None:
    """List what the run wrote to S3 and what is being served."""
    s3 = target.client("s3")
    for prefix in (layout.run_prefix(run_id), layout.serving_prefix(BASE_MODEL_ID)):
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=target.bucket, Prefix=prefix)
        for page in pages:
            for item in page.get("Contents", []):
                print(f"  s3://{target.bucket}/{item['Key']}  ({item['Size']} bytes)")


def prepare_base_model(state_dir: Path) -> Path:
    """The base model's directory: the shipped SFT start when this checkout has one (its files checked
    against their recorded sha256), else a tiny Qwen3-VL with random weights for 7x7 mazes built under
    ``state_dir`` (it solves no maze, so no adapter can beat its baseline)."""
    if BASE_MODEL_DIR.is_dir():
        try:
            report = verify_checkpoint(BASE_MODEL_DIR)
        except SftCheckpointMismatch as error:
            raise PipelineFailed(str(error)) from error
        say(
            f"base model {BASE_MODEL_ID}: the SFT start in {BASE_MODEL_DIR} (sha256 checked; SFT step "
            f"{report['chosen_step']}, {report['chosen_solved']}/64 held-out when it was made)"
        )
        return BASE_MODEL_DIR.resolve()
    say(f"base model {BASE_MODEL_ID}: no SFT start in {BASE_MODEL_DIR}; random weights under {state_dir / 'models'}")
    return build_tiny_qwen3_vl(state_dir / "models" / BASE_MODEL_ID, maze_size=MAZE_SIZE)


def champion_is_an_adapter(target: Target) -> bool:
    """Whether an adapter, not the baseline (the base model alone), is the champion now."""
    pointer = Registry(target.client("dynamodb"), target.registry_table).get_champion(BASE_MODEL_ID)
    return not baseline_leads(pointer)


def run_end(target: Target, run_id: str) -> str:
    """The run's final status in one line: its guard settings, and for a run its guard stopped, which guard and why."""
    run = RunsTable(target.client("dynamodb"), target.runs_table).get_run(run_id)
    if run is None:
        return f"run {run_id}: no row"
    line = f"run {run_id}: {run.status} (guards {json.dumps(run.guard, sort_keys=True)})"
    if run.stopped_by:
        line += f"; stopped by its {run.stopped_by['guard']} guard: {run.stopped_by['reason']}"
    return line


def pipeline_failure(
    trained: int, evaluations: dict[int, str], played: int, must_promote: bool, promoted: bool
) -> str | None:
    """Why the pipeline failed, or None: the training's exit code, each evaluation's final status, the
    play command's exit code, and, when ``must_promote`` (the SFT start), whether an adapter is champion."""
    failed = [f"step {step}: {status}" for step, status in evaluations.items() if status != "SUCCEEDED"]
    if trained != 0 or failed or played != 0:
        return f"training exit {trained}; evaluations not succeeded: {failed or 'none'}; play exit {played}"
    if must_promote and not promoted:
        return "every step ran, but no adapter beat the SFT start's baseline (the decisions above say by how much)"
    return None


def run_pipeline(args: argparse.Namespace) -> int:
    """Prepare the base model, start the stack, train, evaluate, show the results and play live; return the exit
    code (see `pipeline_failure`)."""
    # moto logs every failed ASL state with its whole parse tree; the executions' own errors are printed below.
    logging.getLogger("moto").setLevel(logging.CRITICAL)
    state_dir = args.state_dir.resolve()
    run_id = args.run_id or f"local-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    names.validate_run_id(run_id)
    base_model_path = prepare_base_model(state_dir)
    sft_start = base_model_path == BASE_MODEL_DIR.resolve()

    say("starting the local stack: moto server, SAM template, state machines, Lambdas, Ray head")
    config = LocalStackConfig(
        state_dir=state_dir,
        parameters=stack_parameters(base_model_path, args.poll_seconds),
        with_ray=True,
        serve_port=0,
        watch_interval_s=WATCH_INTERVAL_S,
    )
    with LocalStack(config) as stack:
        started_s = stack.timings["start_s"]
        print(f"  moto server  {stack.endpoint_url}  (stack {config.stack_name}, started in {started_s:.1f} s)")
        print(f"  Ray head     {stack.ray_address}  (Ray Jobs REST API)")
        print(f"  cluster watch every {WATCH_INTERVAL_S:.0f} s  (run guards and Ray head health; 5 minutes on AWS)")
        for key in ("ArtifactsBucketName", "TrainingStateMachineArn", "EvaluationStateMachineArn", "RegistryTableName"):
            print(f"  {key:<26} {stack.outputs[key]}")
        target = local_target(state_dir / "stack.json")
        console = ConsoleServer(target, args.console_port).start()
        print(f"  ops console  {console.url}  (read-only web console; open it in a browser)")

        say(f"deploying the local Ray Serve app (Ray job {SERVE_JOB_ID})")
        print(f"  serving {BASE_MODEL_ID} and <base>:<adapter> at {deploy_serve_app(stack, base_model_path)}/v1")

        spec_path = state_dir / f"{run_id}.json"
        spec_path.write_text(json.dumps(tiny_run_spec(args.steps, args.ckpt_interval, state_dir / "shared"), indent=1))
        say(f"starting run {run_id}: upload s3://{target.bucket}/{layout.run_spec_request_key(run_id)} and follow it")
        common = ["--local", "--local-state", str(state_dir / "stack.json")]
        trained = cli.main(
            [
                "run",
                "start",
                str(spec_path),
                "--run-id",
                run_id,
                "--wait",
                "--interval",
                "2",
                "--progress",
                "30",
                "--timeout",
                str(args.timeout),
                *common,
            ]
        )
        steps = [
            step
            for step in range(args.ckpt_interval, args.steps + 1, args.ckpt_interval)
            if has_manifest(target, run_id, step)
        ]
        say(f"following the evaluations of the adapters uploaded, steps {steps}")
        evaluations = follow_evaluations(target, run_id, steps, args.timeout)

        say("run, executions and Ray jobs")
        cli.main(["run", "show", run_id, *common])
        say("S3 keys")
        print_s3_keys(target, run_id)
        say(f"registry: leaderboard and lineage of {BASE_MODEL_ID}")
        cli.main(["adapters", "leaderboard", BASE_MODEL_ID, *common])
        cli.main(["adapters", "lineage", BASE_MODEL_ID, *common])
        say(
            "promotion decisions (McNemar's exact test against the champion; "
            "b: mazes only the adapter solves, c: only the champion)"
        )
        print_decisions(target, run_id)
        say(f"the live champion endpoint plays held-out maze {PLAY_SEED}")
        path_png = str(state_dir / "champion-path.png")
        played = cli.main(
            [
                "play",
                "--champion",
                "--base-model",
                BASE_MODEL_ID,
                "--size",
                str(MAZE_SIZE),
                "--seed",
                str(PLAY_SEED),
                "--out",
                path_png,
                *common,
            ]
        )
        promoted = champion_is_an_adapter(target)
        say("learning curve")
        cli.main(["curve", "--run", run_id, "--out", str(state_dir / "curve.png"), *common])
        say("the run's end")
        print(f"  {run_end(target, run_id)}")

        failure = pipeline_failure(trained, evaluations, played, must_promote=sft_start, promoted=promoted)
        if failure:
            say(f"FAILED: {failure}")
            return 1
        champion = "an adapter (it beat the baseline)" if promoted else "the baseline (no adapter beat it)"
        say(f"done: run {run_id} trained, {len(steps)} adapters evaluated; the champion is {champion} and played live")
        if args.keep_running:
            say("the stack keeps running for `mazeops-ops --local ...`; press Ctrl-C to stop it")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options (all optional: the defaults run the demo)."""
    parser = argparse.ArgumentParser(
        prog="python -m local_stack.pipeline", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--state-dir", type=Path, default=Path(".local-stack"), help="where the stack keeps its files")
    parser.add_argument("--run-id", help="run id (default local-<utc time>)")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps of the tiny run (default 4)")
    parser.add_argument("--ckpt-interval", type=int, default=2, help="adapter every N steps (default 2)")
    parser.add_argument("--poll-seconds", type=int, default=2, help="state machine poll interval (default 2)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for each execution (default 900)")
    parser.add_argument(
        "--console-port", type=int, default=0, help="port of the ops console on 127.0.0.1 (default: any free one)"
    )
    parser.add_argument("--keep-running", action="store_true", help="keep the stack up for the ops CLI afterwards")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `make local`."""
    try:
        return run_pipeline(parse_args(argv))
    except PipelineFailed as error:
        print(f"local pipeline failed: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
