"""The ops console in a real headless browser (Debian's Chromium driven by Playwright) against the live local stack.

The local stack runs with the fault tests' scripted Ray Jobs API and Serve endpoint (`tests/test_faults_local.py`).
Each page is checked against the APIs the ops CLI reads and saved as a screenshot under `.artifacts/console/`.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cluster_jobs.maze.eval_set import eval_set_for_size
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from local_stack.pipeline import BASE_MODEL_ID, MAZE_SIZE, stack_parameters
from local_stack.stack import LocalStack, LocalStackConfig
from mazeops.baseline import BaselineResult
from mazeops.evalresult import EvalResult, MazeOutcome
from mazeops.names import adapter_name, eval_job_id, training_job_id
from mazeops.registry import Registry
from opsconsole.server import ConsoleServer
from opsctl.queries.executions import execution_arn
from opsctl.target import Target, local_target
from tests.fixtures_models import make_tiny_adapter, upload_adapter
from tests.mazeops_testing import FakeHttpServer
from tests.test_faults_local import FakeRayJobsApi, JobScript, ScriptedServe, wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / ".artifacts" / "console"
EVAL_SET = eval_set_for_size(MAZE_SIZE)  # the set the pipeline's stack parameters configure
RUN, LIVE_RUN, BAD_RUN = "console-run", "console-live", "console-bad"
TRAINING_SPEC = {"base_model_id": BASE_MODEL_ID, "backend": "tiny", "total_steps": 2}
BASELINE_BITS = "0" * 64
STEP_BITS = {1: "1" * 20 + "0" * 44, 2: "0" * 10 + "1" * 25 + "0" * 29}  # step 2 vs step 1: b=15, c=10
# Chromium as the machine's packages install it (`make setup` installs Debian's chromium); CHROMIUM overrides.
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-background-networking",  # no calls home from a machine with no network
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_S = 120


@dataclass
class Console:
    """The live stack, its scripted Ray head, the console's URL and the ops CLI's view of the stack."""

    stack: LocalStack
    ray: FakeRayJobsApi
    target: Target
    url: str

    def sfn(self) -> Any:
        return self.target.client("stepfunctions")

    def arn(self, machine: str, name: str) -> str:
        return execution_arn(self.target.state_machines[machine], name)

    def ended(self, machine: str, name: str) -> dict[str, Any]:
        """describe_execution of `name` once it has ended."""

        def probe() -> dict[str, Any] | None:
            try:
                described = self.sfn().describe_execution(executionArn=self.arn(machine, name))
            except self.sfn().exceptions.ExecutionDoesNotExist:
                return None
            return described if described["status"] != "RUNNING" else None

        return wait_for(probe, TIMEOUT_S, f"execution {name} to end")

    def story(self, machine: str, name: str) -> str:
        """What the execution `name` did so far, for a failure message: its status, its failed events (error and
        the cause's start), its last events and the Ray requests about its job."""
        try:
            status = self.sfn().describe_execution(executionArn=self.arn(machine, name))["status"]
        except self.sfn().exceptions.ExecutionDoesNotExist:
            return f"no {machine} execution {name} exists"
        history = self.sfn().get_execution_history(executionArn=self.arn(machine, name), maxResults=1000)["events"]
        events = sorted(history, key=lambda event: event["id"])  # moto ignores reverseOrder
        failures = [
            f"{event['type']}: {details.get('error')}: {str(details.get('cause'))[:300]}"
            for event in events
            for key, details in event.items()
            if key.endswith("EventDetails") and "error" in details
        ]
        last = [event["type"] for event in events[-6:]]
        return (
            f"{machine} execution {name} is {status}; failures, oldest first: {failures}; latest events: {last}; "
            f"Ray requests: {self.ray.requests_for(name)}"
        )


def _outcomes(bits: str) -> list[MazeOutcome]:
    return [
        MazeOutcome(seed=seed, solved=bit == "1", turns=5, error=None)
        for seed, bit in zip(EVAL_SET.seeds, bits, strict=True)
    ]


def _write_result(s3: Any, submission: dict[str, Any]) -> None:
    """Stand in for the cluster: an evaluation or baseline job writes its scripted result to its --output."""
    argv = shlex.split(submission["entrypoint"])
    if "--output" not in argv:
        return
    bucket, _, key = argv[argv.index("--output") + 1].removeprefix("s3://").partition("/")
    metadata = submission["metadata"]
    common = {"backend": "transformers", "started_at": "2026-12-03T06:00:00Z", "finished_at": "2026-12-03T06:01:00Z"}
    if metadata["kind"] == "baseline":
        result = BaselineResult(
            schema="maze-baseline/v1",
            base_model_id=BASE_MODEL_ID,
            eval_set_name=EVAL_SET.name,
            eval_set_sha256=EVAL_SET.sha256,
            outcomes=_outcomes(BASELINE_BITS),
            **common,
        )
    else:
        run_id, step = metadata["run_id"], int(metadata["step"])
        bits = STEP_BITS[step]
        result = EvalResult.of_outcomes(
            run_id=run_id,
            step=step,
            adapter_name=adapter_name(run_id, step),
            base_model_id=BASE_MODEL_ID,
            eval_set_sha256=EVAL_SET.sha256,
            outcomes=_outcomes(bits),
            **common,
        )
    s3.put_object(Bucket=bucket, Key=key, Body=result.to_json().encode())


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """The stack after this scenario, and the console serving it:

    - `requests/console-bad.json` names an unknown base model: its training execution FAILS at ValidateRunSpec;
    - run `console-run` trains (the scripted job succeeds) and publishes two adapters: step 1 solves
      20 of the 64 mazes against a baseline of 0 (promoted: b=20, c=0), step 2 solves 25 others in
      part (b=15, c=10: not significant, rejected);
    - run `console-live` stays RUNNING (its scripted job never ends), so its execution has a current
      state and its job log grows while the run page is open.
    """
    work = tmp_path_factory.mktemp("console")
    base_model = build_tiny_qwen3_vl(work / "models" / BASE_MODEL_ID)
    make_tiny_adapter(base_model, work / "adapter")
    moto_logger = logging.getLogger("moto")
    saved_level = moto_logger.level
    moto_logger.setLevel(logging.CRITICAL)  # every failed ASL state is logged with its whole parse tree
    ray = FakeRayJobsApi()
    ray.up()
    ray.scripts[training_job_id(RUN)] = JobScript(logs="step 1 reward 0.20\nstep 2 reward 0.35\n")
    ray.scripts[training_job_id(LIVE_RUN)] = JobScript(
        status="RUNNING", message="training", logs="step 1 reward 0.10\n"
    )
    parameters = stack_parameters(base_model, poll_seconds=1)
    try:
        with FakeHttpServer({("POST", "/v1/chat/completions"): ScriptedServe().route}) as serve:
            parameters.update(RayAddress=ray.url, ServeUrl=serve.url)
            config = LocalStackConfig(
                template_path=REPO / "template.yaml", state_dir=work / "stack", parameters=parameters
            )
            with LocalStack(config) as stack:
                s3, bucket = stack.session.client("s3"), stack.outputs["ArtifactsBucketName"]
                ray.on_submit = lambda submission: _write_result(s3, submission)
                rig = Console(stack, ray, local_target(work / "stack" / "stack.json"), "")
                s3.put_object(Bucket=bucket, Key=f"requests/{BAD_RUN}.json", Body=b'{"base_model_id": "no-such-model"}')
                s3.put_object(Bucket=bucket, Key=f"requests/{RUN}.json", Body=json.dumps(TRAINING_SPEC).encode())
                assert rig.ended("training", training_job_id(BAD_RUN))["status"] == "FAILED"
                assert rig.ended("training", training_job_id(RUN))["status"] == "SUCCEEDED"
                for step in STEP_BITS:
                    upload_adapter(s3, bucket, RUN, step, work / "adapter", base_model_id=BASE_MODEL_ID)
                    assert rig.ended("evaluation", eval_job_id(RUN, step))["status"] == "SUCCEEDED"
                s3.put_object(Bucket=bucket, Key=f"requests/{LIVE_RUN}.json", Body=json.dumps(TRAINING_SPEC).encode())
                with ConsoleServer(rig.target) as server:
                    rig.url = server.url
                    yield rig
    finally:
        ray.down()
        moto_logger.setLevel(saved_level)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium from the system packages, driven by Playwright."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "no chromium on PATH: run `make setup` (it installs Debian's chromium) or set CHROMIUM"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(60_000)
    yield opened
    context.close()


def shot(page: Any, name: str) -> None:
    """Save a full-page screenshot of `page` as `.artifacts/console/<name>.png`."""
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def open_page(page: Any, url: str) -> int:
    """Open `url`; its HTTP status."""
    response = page.goto(url)
    assert response is not None
    return response.status


# --- executions --------------------------------------------------------------------------------


def test_executions_lists_both_state_machines_newest_first(console: Console, page: Any) -> None:
    assert open_page(page, f"{console.url}/executions") == 200
    names = page.locator("#executions tr[data-name]").evaluate_all("rows => rows.map(r => r.dataset.name)")
    listed = [
        console.sfn().list_executions(stateMachineArn=arn)["executions"]
        for arn in console.target.state_machines.values()
    ]
    expected = [execution["name"] for executions in listed for execution in executions]
    assert sorted(names) == sorted(expected)
    assert {training_job_id(RUN), training_job_id(BAD_RUN), eval_job_id(RUN, 1), eval_job_id(RUN, 2)} <= set(names)
    started = [
        console.sfn().describe_execution(
            executionArn=console.arn("evaluation" if n.startswith("eval-") else "training", n)
        )["startDate"]
        for n in names
    ]
    assert started == sorted(started, reverse=True)
    row = page.locator(f"#executions tr[data-name='{eval_job_id(RUN, 1)}']")
    assert row.locator("td").nth(6).inner_text() == adapter_name(RUN, 1)
    assert row.locator("td").nth(5).inner_text() == RUN
    shot(page, "executions")


def _history_matches(console: Console, page: Any, machine: str, name: str) -> dict[str, Any]:
    described = console.sfn().describe_execution(executionArn=console.arn(machine, name))
    assert open_page(page, f"{console.url}/executions/{machine}/{name}") == 200
    assert page.locator("#status").inner_text() == described["status"]
    events = console.sfn().get_execution_history(executionArn=console.arn(machine, name), maxResults=1000)["events"]
    rows = page.locator("#history tr[data-id]").evaluate_all(
        "rows => rows.map(r => [Number(r.dataset.id), r.dataset.type])"
    )
    assert rows == [[event["id"], event["type"]] for event in events]
    entered = {e["stateEnteredEventDetails"]["name"] for e in events if e["type"].endswith("StateEntered")}
    marked = set(
        page.locator("#graph g[data-mark]:not([data-mark=''])").evaluate_all("gs => gs.map(g => g.dataset.state)")
    )
    assert marked == entered
    return described


def test_an_execution_history_matches_the_step_functions_api(console: Console, page: Any) -> None:
    described = _history_matches(console, page, "evaluation", eval_job_id(RUN, 1))
    assert described["status"] == "SUCCEEDED"
    states = page.locator("#graph g[data-state]").evaluate_all("gs => gs.map(g => g.dataset.state)")
    definition = json.loads(
        console.sfn().describe_state_machine(stateMachineArn=console.target.state_machines["evaluation"])["definition"]
    )
    assert sorted(states) == sorted(definition["States"])
    assert page.locator("#graph g[data-state='Promoted']").get_attribute("data-mark") == "visited"
    assert page.locator("#graph g[data-mark='failed']").count() == 0
    shot(page, "execution-succeeded")


def test_a_failed_execution_shows_its_failed_state(console: Console, page: Any) -> None:
    described = _history_matches(console, page, "training", training_job_id(BAD_RUN))
    assert described["status"] == "FAILED"
    failed = page.locator("#graph g[data-mark='failed']").evaluate_all("gs => gs.map(g => g.dataset.state)")
    assert set(failed) == {"ValidateRunSpec", "RunFailed"}
    assert page.locator("#failed-states").inner_text() == "RunFailed, ValidateRunSpec"
    assert described["error"] in page.locator("#error").inner_text()
    assert "no-such-model" in page.locator("#error").inner_text()
    assert page.locator("#history tr.failed").count() >= 1
    shot(page, "execution-failed")
    # The helper the live-run tests fail with tells the same failure.
    assert f"is FAILED; failures, oldest first: ['TaskFailed: {described['error']}: " in console.story(
        "training", training_job_id(BAD_RUN)
    )


def test_a_running_execution_marks_its_current_state(console: Console, page: Any) -> None:
    name = training_job_id(LIVE_RUN)
    try:
        wait_for(lambda: console.ray.submissions(name), TIMEOUT_S, f"{name} to submit its job")
    except AssertionError as error:
        raise AssertionError(f"{error}; {console.story('training', name)}") from error
    assert open_page(page, f"{console.url}/executions/training/{name}") == 200
    assert page.locator("#status").inner_text() == "RUNNING", console.story("training", name)
    current = page.locator("#graph g[data-mark='current']").evaluate_all("gs => gs.map(g => g.dataset.state)")
    assert len(current) == 1 and current[0] in {"WaitForJob", "GetJobStatus", "JobFinished?"}
    shot(page, "execution-running")


# --- runs ------------------------------------------------------------------------------------------


def test_runs_show_ray_job_status_and_a_live_log_tail(console: Console, page: Any) -> None:
    assert open_page(page, f"{console.url}/runs") == 200
    assert page.locator(f"#runs tr[data-run='{RUN}'] td").nth(6).inner_text() == "SUCCEEDED"
    assert page.locator(f"#runs tr[data-run='{LIVE_RUN}'] td").nth(6).inner_text() == "RUNNING"
    shot(page, "runs")

    assert open_page(page, f"{console.url}/runs/{LIVE_RUN}") == 200
    log = page.locator(f"pre.log[data-job='{training_job_id(LIVE_RUN)}']")
    assert "step 1 reward 0.10" in log.inner_text()
    console.ray.scripts[training_job_id(LIVE_RUN)].logs += "step 2 reward 0.30\n"
    page.wait_for_function(
        "job => document.querySelector(`pre.log[data-job='${job}']`).textContent.includes('step 2 reward 0.30')",
        arg=training_job_id(LIVE_RUN),
        timeout=15_000,
    )  # the page was not reloaded: its tail refreshes itself
    shot(page, "run-live")


def test_a_run_page_shows_its_learning_curve(console: Console, page: Any) -> None:
    assert open_page(page, f"{console.url}/runs/{RUN}") == 200
    assert page.locator("#run dd.status").inner_text() == "SUCCEEDED"
    page.wait_for_function("() => document.querySelector('#curve').complete")
    assert page.locator("#curve").evaluate("img => img.naturalWidth") > 0
    assert "step 2 reward 0.35" in page.locator(f"pre.log[data-job='{training_job_id(RUN)}']").inner_text()
    shot(page, "run-curve")


# --- the registry and the maze pictures ---------------------------------------------------------


def test_registry_shows_baseline_champion_decisions_and_lineage(console: Console, page: Any) -> None:
    registry = Registry(console.target.client("dynamodb"), console.target.registry_table)
    assert open_page(page, f"{console.url}/registry") == 200
    page.click(f"text={BASE_MODEL_ID}")
    assert page.locator("#champion").inner_text() == adapter_name(RUN, 1)
    assert "READY" in page.locator("#baselines").inner_text()
    for step, status in ((1, "CHAMPION"), (2, "REJECTED")):
        record = registry.get_adapter(BASE_MODEL_ID, adapter_name(RUN, step))
        assert record is not None and record.status == status
        cells = page.locator(f"#leaderboard tr[data-adapter='{adapter_name(RUN, step)}'] td").all_inner_texts()
        evidence = record.decision
        assert cells[2] == status
        assert (cells[5], cells[6]) == (str(evidence["b"]), str(evidence["c"]))
        assert cells[7] == f"{evidence['p_value']:.3g}"
        assert cells[8] == record.decision["reason"]
    lineage = page.locator("#lineage li").all_inner_texts()
    assert lineage[0].startswith("baseline") and lineage[1].startswith(adapter_name(RUN, 1))
    shot(page, "registry")


def test_the_maze_grid_makes_the_discordant_pairs_stand_out(console: Console, page: Any) -> None:
    assert open_page(page, f"{console.url}/registry/{BASE_MODEL_ID}/mazes") == 200
    kinds = page.locator("#grid a.tile").evaluate_all("tiles => tiles.map(t => t.dataset.kind)")
    assert len(kinds) == 64
    assert (kinds.count("challenger"), kinds.count("champion")) == (15, 10)  # step 2 against the champion step 1
    assert "b = 15, c = 10" in page.locator("#summary").inner_text()
    colours = {
        kind: page.locator(f"#grid a.tile.{kind}").first.evaluate("t => getComputedStyle(t).borderTopColor")
        for kind in ("challenger", "champion", "both", "neither")
    }
    assert len(set(colours.values())) == 4
    shot(page, "mazes")

    page.locator("#grid a.tile[data-seed='12']").click()
    page.wait_for_selector("#path")
    assert page.locator("#path").evaluate("img => img.naturalWidth") > 0
    assert "seed 12" in page.locator("h1").inner_text()
    assert "turn 1/" in page.locator("#turns").inner_text()
    shot(page, "play")


# --- what the console refuses --------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/executions/training/train-no-such-run",
        "/executions/no-such-machine/x",
        "/runs/no-such-run",
        "/runs/Bad%20Id!",
        "/registry/no-such-model",
        "/no/such/page",
    ],
)
def test_unknown_ids_get_a_404_page(console: Console, page: Any, path: str) -> None:
    assert open_page(page, console.url + path) == 404
    assert page.locator("#error-title").inner_text().startswith("404")
    assert "Traceback" not in page.content()
    if path == "/runs/no-such-run":
        shot(page, "not-found")


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize("path", ["/executions", f"/runs/{RUN}", f"/registry/{BASE_MODEL_ID}", "/no/such/page"])
def test_no_endpoint_writes(console: Console, method: str, path: str) -> None:
    before = console.sfn().list_executions(stateMachineArn=console.target.state_machines["training"])["executions"]
    request = urllib.request.Request(console.url + path, data=b"{}", method=method)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405
    assert len(
        console.sfn().list_executions(stateMachineArn=console.target.state_machines["training"])["executions"]
    ) == len(before)


def test_the_console_listens_on_loopback_only(console: Console) -> None:
    assert console.url.startswith("http://127.0.0.1:")
    request = urllib.request.Request(console.url + "/executions", headers={"Host": "attacker.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
