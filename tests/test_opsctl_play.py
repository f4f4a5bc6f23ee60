"""`play` against a fake OpenAI-compatible serve endpoint (scripted BFS or nonsense answers), and `draw_path`."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from mazeops_testing import JsonRequestHandler, closed_port_url
from opsctl_testing import BASE, Deployment, FakeHead, cli, create_deployment, make_champion, seed_adapter
from PIL import Image, ImageFont

from cluster_jobs.maze.actions import DIRECTION_STEPS
from cluster_jobs.maze.eval_set import eval_set_for_size
from cluster_jobs.maze.generator import Maze, Position, generate_maze
from cluster_jobs.maze.render import PATH_RGB as OPEN_RGB
from cluster_jobs.maze.render import WALL_RGB, render_maze
from mazeops.baseline import BASELINE, BaselineResult
from mazeops.evalresult import MazeOutcome
from mazeops.names import CHAMPION_SORT_KEY
from opsctl import play
from opsctl.errors import OpsError
from opsctl.path_png import PATH_RGB, PLAY_CELL_PX, draw_path, wrap_title

SEED = 5
ADAPTER_MODEL = f"{BASE}:r1-step20"
NONSENSE = "I would rather not play mazes today."


@dataclass
class FakeServe:
    """Serves `models`; answer `index` of the scripted list for the index-th chat request (the last one after)."""

    url: str = ""
    models: set[str] = field(default_factory=lambda: {BASE, ADAPTER_MODEL})
    answer: Callable[[int], str] = lambda index: NONSENSE
    requests: list[dict[str, Any]] = field(default_factory=list)


def _handler(serve: FakeServe) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/chat/completions":
                self.send_json(404, {"detail": "Not Found"})
            elif body["model"] not in serve.models:
                message = f"The model `{body['model']}` does not exist."
                self.send_json(404, {"error": {"message": message, "type": "NotFoundError", "code": 404}})
            else:
                index = len(serve.requests)
                serve.requests.append(body)
                message = {"role": "assistant", "content": serve.answer(index)}
                completion = {"object": "chat.completion", "model": body["model"], "choices": [{"message": message}]}
                self.send_json(200, completion)

    return Handler


@pytest.fixture
def serve() -> Iterator[FakeServe]:
    """The fake endpoint on 127.0.0.1 (answers nonsense until a test scripts it)."""
    fake = FakeServe()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


@pytest.fixture
def stack(moto_executing_asl: None, serve: FakeServe) -> Deployment:
    """The moto deployment whose SERVE_URL is the fake endpoint."""
    return create_deployment(FakeHead(url=serve.url))


def direction(a: Position, b: Position) -> int:
    """The move direction from cell `a` to its neighbour `b`."""
    return {step: d for d, step in DIRECTION_STEPS.items()}[(b[0] - a[0], b[1] - a[1])]


def bfs_answers(maze: Maze) -> list[str]:
    """The moves of the maze's shortest path (SFT style, with <action> blocks), then stop."""
    path = maze.shortest_path()
    return [
        f"<observation>The agent is at {a}.</observation>\n<action>('move', {direction(a, b)})</action>"
        for a, b in zip(path, path[1:], strict=False)
    ] + ["<action>('stop', 'stop')</action>"]


def the_maze(size: int = 9, seed: int = SEED) -> Maze:
    eval_set = eval_set_for_size(size)
    return eval_set.mazes[eval_set.seeds.index(seed)]


def centre(cell: Position, cell_px: int, top: int = 0) -> tuple[int, int]:
    """The pixel (x, y) at the centre of grid cell (row, col), the maze drawn from row `top` of the picture."""
    return (int((cell[1] + 0.5) * cell_px), top + int((cell[0] + 0.5) * cell_px))


def test_bfs_policy_solves_the_maze_turn_by_turn_and_draws_its_path(stack, serve, capsys, tmp_path):
    maze = the_maze()
    answers = bfs_answers(maze)
    serve.answer = lambda index: answers[index]
    out = tmp_path / "solved.png"
    status, stdout, stderr = cli(capsys, "play", "--model", ADAPTER_MODEL, "--seed", str(SEED), "--out", str(out))
    assert (status, stderr) == (0, "")
    shortest = maze.shortest_path_length()
    budget = eval_set_for_size(9).max_turns
    lines = stdout.splitlines()
    assert lines[0] == (
        f"playing maze seed {SEED} (size 9, shortest path {shortest} moves, at most {budget} turns) "
        f"with {ADAPTER_MODEL} at {serve.url}"
    )
    path = maze.shortest_path()
    turns = re.findall(r"^turn (\d+)/(\d+): agent \((\d+), (\d+)\) -> \((\d+), (\d+)\)$", stdout, re.MULTILINE)
    assert [int(t[0]) for t in turns] == list(range(1, len(answers) + 1))
    assert {int(t[1]) for t in turns} == {budget}
    assert [(int(t[4]), int(t[5])) for t in turns] == [*path[1:], path[-1]]
    first = lines.index(f"turn 1/{budget}: agent (1, 1) -> {path[1]}")
    move = f"<action>('move', {direction(path[0], path[1])})</action>"
    assert lines[first + 1] == f"  answer:   <observation>The agent is at (1, 1).</observation> {move}"
    assert lines[first + 2] == "  feedback: Action executed successfully."
    assert "  feedback: You stopped on the target. The maze is solved." in lines
    assert lines[-2:] == [f"outcome: solved in {shortest + 1} turns (shortest path {shortest} moves)", f"wrote {out}"]

    assert len(serve.requests) == shortest + 1
    assert {(r["model"], r["temperature"], r["max_tokens"]) for r in serve.requests} == {(ADAPTER_MODEL, 0, 512)}
    assert [m["role"] for m in serve.requests[0]["messages"]] == ["system", "user"]
    # The deployment evaluates with vLLM, so playing shows the whole conversation, as SkyRL's generator does.
    assert [m["role"] for m in serve.requests[2]["messages"]] == ["system", *["user", "assistant"] * 2, "user"]
    assert serve.requests[0]["messages"][1]["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")

    picture = Image.open(out).convert("RGB")
    side = maze.size * PLAY_CELL_PX
    assert picture.width == side and picture.height > side
    top = picture.height - side
    for cell in path:
        assert picture.getpixel(centre(cell, PLAY_CELL_PX, top)) == PATH_RGB, cell
    for a, b in zip(path, path[1:], strict=False):  # the line crosses the edge between consecutive cells
        x, y = centre(a, PLAY_CELL_PX, top)
        x2, y2 = centre(b, PLAY_CELL_PX, top)
        assert picture.getpixel(((x + x2) // 2, (y + y2) // 2)) == PATH_RGB
    off_path = [
        (row, col)
        for row in range(maze.size)
        for col in range(maze.size)
        if not maze.is_wall((row, col)) and (row, col) not in path
    ]
    assert off_path and all(picture.getpixel(centre(cell, PLAY_CELL_PX, top)) == OPEN_RGB for cell in off_path)
    assert picture.getpixel(centre((0, 0), PLAY_CELL_PX, top)) == WALL_RGB


def test_nonsense_answers_do_not_solve_the_maze(stack, serve, capsys, tmp_path):
    out = tmp_path / "lost.png"
    status, stdout, _ = cli(
        capsys, "play", "--model", BASE, "--seed", "3", "--size", "7", "--max-turns", "3", "--out", str(out)
    )
    maze = the_maze(7, 3)
    assert status == 0
    assert f"playing maze seed 3 (size 7, shortest path {maze.shortest_path_length()} moves, at most 3 turns)" in stdout
    assert re.findall(r"^turn (\d)/3: agent \(1, 1\) -> \(1, 1\)$", stdout, re.MULTILINE) == ["1", "2", "3"]
    assert f"  answer:   {NONSENSE}" in stdout
    assert "  feedback: Invalid answer: expected exactly one action" in stdout
    assert "  feedback: Invalid answer: " in stdout and stdout.count("No turns left.") == 1
    assert f"outcome: not solved after 3 turns (shortest path {maze.shortest_path_length()} moves)" in stdout
    assert "last malformed answer: expected exactly one action like ('move', 0)" in stdout
    assert [r["model"] for r in serve.requests] == [BASE] * 3
    picture = Image.open(out).convert("RGB")
    top = picture.height - 7 * PLAY_CELL_PX
    assert picture.width == 7 * PLAY_CELL_PX
    assert picture.getpixel(centre((1, 1), PLAY_CELL_PX, top)) == PATH_RGB
    assert picture.getpixel(centre((1, 2), PLAY_CELL_PX, top)) in (OPEN_RGB, WALL_RGB)


def test_champion_is_resolved_from_the_registry(stack, serve, capsys, tmp_path):
    seed_adapter(stack, "r1", 20)
    make_champion(stack, "r1-step20", "first adapter")
    status, stdout, _ = cli(
        capsys, "play", "--champion", "--base-model", BASE, "--max-turns", "1", "--out", str(tmp_path / "c.png")
    )
    assert status == 0 and f"with {ADAPTER_MODEL} at" in stdout
    assert [r["model"] for r in serve.requests] == [ADAPTER_MODEL]


def test_the_baseline_champion_is_the_base_model_itself(stack, serve, capsys, tmp_path):
    boto3.client("dynamodb").put_item(
        TableName=stack.registry_table,
        Item={
            "base_model_id": {"S": BASE},
            "adapter_name": {"S": CHAMPION_SORT_KEY},
            "champion": {"S": BASELINE},
            "previous": {"L": []},
            "version": {"N": "2"},
        },
    )
    out = tmp_path / "b.png"
    status, _, _ = cli(capsys, "play", "--champion", "--base-model", BASE, "--max-turns", "1", "--out", str(out))
    assert status == 0
    assert [r["model"] for r in serve.requests] == [BASE]


def _claim_baseline(stack: Deployment, ready: bool) -> None:
    """A baseline row of BASE on the 9x9 set: claimed (EVALUATING), then READY if `ready`."""
    eval_set = eval_set_for_size(9)
    stack.registry.claim_baseline(BASE, eval_set.sha256)
    if ready:
        result = BaselineResult(
            base_model_id=BASE,
            eval_set_name=eval_set.name,
            eval_set_sha256=eval_set.sha256,
            outcomes=[MazeOutcome(seed=seed, solved=seed % 2 == 0, turns=9) for seed in eval_set.seeds],
            backend="transformers",
            started_at="2026-12-02T16:00:00Z",
            finished_at="2026-12-02T16:05:00Z",
        )
        stack.registry.record_baseline(result, attempt=1)


def test_before_any_promotion_a_ready_baseline_is_the_champion(stack, serve, capsys, tmp_path):
    _claim_baseline(stack, ready=True)
    out = tmp_path / "b.png"
    status, _, _ = cli(capsys, "play", "--champion", "--base-model", BASE, "--max-turns", "1", "--out", str(out))
    assert status == 0
    assert [r["model"] for r in serve.requests] == [BASE]


def test_a_baseline_still_evaluating_is_no_champion_yet(stack, serve, capsys):
    _claim_baseline(stack, ready=False)
    status, _, stderr = cli(capsys, "play", "--champion", "--base-model", BASE)
    assert status == 2 and f"base model '{BASE}' has no champion yet" in stderr
    assert serve.requests == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--champion", "--base-model", BASE], f"base model '{BASE}' has no champion yet"),
        (["--champion"], "--champion needs --base-model"),
        (["--model", ADAPTER_MODEL, "--base-model", BASE], "--base-model goes with --champion"),
        (["--model", f"{BASE}:r9-step1"], f"unknown model '{BASE}:r9-step1': "),
        (["--model", "llama-7b"], "unknown model 'llama-7b'"),
        (["--model", f"{BASE}:not an adapter"], "invalid adapter name"),
        (["--model", BASE, "--seed", "64"], "seed 64 is not in the evaluation set maze-eval-64 (seeds 0..63, size 9)"),
        (["--model", BASE, "--size", "8"], "there is no fixed evaluation set for 8x8 mazes"),
    ],
)
def test_refusals_are_one_line_errors(stack, serve, capsys, tmp_path, argv, message):
    out = tmp_path / "never.png"
    status, stdout, stderr = cli(capsys, "play", *argv, "--out", str(out))
    assert status == 2 and stderr.startswith("mazeops-ops: error: ") and message in stderr
    assert stderr.count("\n") == 1 and not out.exists()


def test_unknown_model_names_the_endpoint_and_its_message(stack, serve, capsys):
    _, _, stderr = cli(capsys, "play", "--model", f"{BASE}:r9-step1")
    assert f"{serve.url}/v1/chat/completions answered HTTP 404: The model `{BASE}:r9-step1` does not exist." in stderr


def test_unreachable_endpoint(moto_executing_asl, capsys, tmp_path):
    url = closed_port_url()
    create_deployment(FakeHead(url=url))
    status, _, stderr = cli(capsys, "play", "--model", BASE, "--out", str(tmp_path / "never.png"))
    assert status == 2
    assert stderr.startswith(f"mazeops-ops: error: cannot reach the serve endpoint {url}/v1/chat/completions: ")
    assert stderr.count("\n") == 1


def test_play_uses_the_evaluations_answer_budget():
    from cluster_jobs.evaluate import backends

    assert play.ANSWER_MAX_TOKENS == backends.DEFAULT_MAX_NEW_TOKENS


@pytest.mark.parametrize(("engine", "history"), [("vllm", None), ("transformers", 1), ("", None)])
def test_play_shows_the_conversation_the_deployments_evaluation_shows(engine, history):
    target = SimpleNamespace(lambda_settings={"EVAL_BACKEND": engine})
    assert play.history_turns(target) == history


def test_an_unknown_evaluation_engine_is_refused():
    with pytest.raises(OpsError, match="EVAL_BACKEND 'tensorrt' is none of vllm, transformers"):
        play.history_turns(SimpleNamespace(lambda_settings={"EVAL_BACKEND": "tensorrt"}))


def test_draw_path_draws_the_visited_cells_over_the_maze():
    maze = generate_maze(7, 11)
    path = maze.shortest_path()
    positions = [*path[:3], path[1], *path[1:]]  # a step back and forth: cells repeat
    cell_px = 20
    picture = draw_path(maze, positions, "model x\nseed 11")
    assert picture.mode == "RGB" and picture.width == 7 * PLAY_CELL_PX
    picture = draw_path(maze, positions, "model x\nseed 11", cell_px=cell_px)
    side = 7 * cell_px
    assert picture.width == side and picture.height > side
    top = picture.height - side
    band = picture.crop((0, 0, side, top))
    assert band.getextrema() != ((255, 255),) * 3, "the title is drawn"
    board = picture.crop((0, top, side, picture.height))
    plain = render_maze(maze, path[-1], cell_px)
    for row in range(maze.size):
        for col in range(maze.size):
            box = (col * cell_px, row * cell_px, (col + 1) * cell_px, (row + 1) * cell_px)
            if (row, col) in path:
                assert board.getpixel(centre((row, col), cell_px)) == PATH_RGB
            else:  # cells off the path are exactly the rendered maze
                assert board.crop(box).tobytes() == plain.crop(box).tobytes(), (row, col)
    for a, b in zip(path, path[1:], strict=False):  # the line joins consecutive cells across their shared edge
        (x, y), (x2, y2) = centre(a, cell_px), centre(b, cell_px)
        assert board.getpixel(((x + x2) // 2, (y + y2) // 2)) == PATH_RGB, (a, b)


def test_draw_path_refuses_walls_and_no_cells():
    maze = generate_maze(5, 0)
    with pytest.raises(ValueError, match=r"\(0, 0\) is not"):
        draw_path(maze, [maze.start, (0, 0)], "t")
    with pytest.raises(ValueError, match="at least the start cell"):
        draw_path(maze, [], "t")


def test_long_titles_wrap_to_the_maze_width():
    maze = generate_maze(5, 0)
    title = "qwen3-vl-8b-sft:a-very-long-run-name-that-goes-on-step123456\nseed 3, size 5: not solved after 17 turns"
    short = draw_path(maze, [maze.start], "t", cell_px=20)
    tall = draw_path(maze, [maze.start], title, cell_px=20)
    assert tall.width == short.width == 100 and tall.height > short.height
    font = ImageFont.load_default(size=14)
    lines = wrap_title(title, font, 88)
    assert len(lines) > 2 and all(font.getlength(line) <= 88 for line in lines)
    assert "".join(lines).replace(" ", "") == title.replace("\n", "").replace(" ", "")
