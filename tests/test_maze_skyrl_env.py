"""The SkyRL env (registration, make, a full episode), the chat messages and the prompt datasets."""

import base64
import io
import json

import pytest
import skyrl_gym
from PIL import Image
from skyrl_gym.envs.registration import EnvSpec

from cluster_jobs.maze.actions import DIRECTION_STEPS, STOP, Action
from cluster_jobs.maze.dataset import write_eval_dataset, write_prompt_dataset, write_training_dataset
from cluster_jobs.maze.env import Observation
from cluster_jobs.maze.eval_set import NoEvalSet, training_seeds
from cluster_jobs.maze.generator import generate_maze
from cluster_jobs.maze.prompt import SYSTEM_PROMPT, observation_message
from cluster_jobs.maze.render import AGENT_RGB, render_maze
from cluster_jobs.maze.skyrl_env import ENTRY_POINT, MazeEnv, register_maze_env


def _image_of(message):
    """Decode the image part of a user message and check the message shape."""
    assert message["role"] == "user"
    image_part, text_part = message["content"]
    assert set(image_part) == {"type", "image_url"} and image_part["type"] == "image_url"
    assert set(text_part) == {"type", "text"} and text_part["type"] == "text"
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")


def _oracle_answers(maze):
    path = maze.shortest_path()
    direction_of = {step: d for d, step in DIRECTION_STEPS.items()}
    moves = [direction_of[(b[0] - a[0], b[1] - a[1])] for a, b in zip(path, path[1:], strict=False)]
    return [f"<action>{Action('move', d).to_text()}</action>" for d in moves] + [STOP.to_text()]


def _extras(row):
    """The env extras SkyRL's PromptDataset derives from a row: every column but prompt and env_class."""
    return {k: v for k, v in row.items() if k not in ("prompt", "env_class")}


def test_system_prompt_states_legend_actions_and_goal():
    for phrase in (
        "gray",
        "white",
        "blue circle",
        "red target square",
        "('move', direction)",
        "0=right, 1=up, 2=left, 3=down",
        "('stop', 'stop')",
        "<action>",
    ):
        assert phrase in SYSTEM_PROMPT


def test_observation_message_shape():
    maze = generate_maze(9, 0)
    obs = Observation(image=render_maze(maze, maze.start), text="Cannot move into a wall.")
    first, later = observation_message(obs, first=True), observation_message(obs, first=False)
    assert set(first) == {"role", "content"}
    assert _image_of(first).tobytes() == obs.image.tobytes()
    assert first["content"][1]["text"].startswith("Here is the maze.")
    assert later["content"][1]["text"].startswith("Cannot move into a wall.")
    json.dumps(first)  # plain JSON, as it travels to vLLM / Ray Serve


def test_registration_is_idempotent_and_make_builds_the_env():
    register_maze_env()
    register_maze_env()
    assert skyrl_gym.registry["maze2d"].entry_point == ENTRY_POINT
    env = skyrl_gym.make("maze2d", env_config={"size": 11}, extras={"seed": 3, "max_turns": 20})
    assert isinstance(env, MazeEnv)
    assert env.episode.maze == generate_maze(11, 3) and env.max_turns == 20


def test_conflicting_registration_is_refused(monkeypatch):
    monkeypatch.setitem(skyrl_gym.registry, "maze2d", EnvSpec(id="maze2d", entry_point="other.module:Env"))
    with pytest.raises(ValueError, match="already registered"):
        register_maze_env()


def test_extras_override_env_config_and_seed_is_required():
    env = MazeEnv(env_config={"size": 11, "seed": 1}, extras={"seed": 2, "size": 9})
    assert env.episode.maze == generate_maze(9, 2) and env.max_turns == 15
    with pytest.raises(ValueError, match="seed"):
        MazeEnv(env_config={}, extras={"size": 9})
    with pytest.raises(TypeError, match="mapping"):
        MazeEnv(env_config=["size", 9], extras={"seed": 1})
    for bad in ({"seed": "3"}, {"seed": 3.0}, {"seed": 3, "max_turns": "15"}):
        with pytest.raises(ValueError, match="must be an integer"):
            MazeEnv(extras=bad)


def test_numpy_integers_from_a_dataset_are_accepted():
    numpy = pytest.importorskip("numpy")
    env = MazeEnv(extras={"seed": numpy.int64(4), "size": numpy.int64(9), "max_turns": numpy.int32(7)})
    assert env.episode.maze == generate_maze(9, 4) and env.max_turns == 7


def test_full_episode_through_skyrl_gym(tmp_path):
    register_maze_env()
    path = tmp_path / "train.jsonl"
    write_training_dataset(path, n=1, size=9)
    row = json.loads(path.read_text())
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=_extras(row))
    maze = env.episode.maze

    messages, info = env.init(row["prompt"])
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert _image_of(messages[1]).tobytes() == render_maze(maze, maze.start).tobytes()
    assert info == {"seed": row["seed"], "size": 9}

    bump = env.step("('move', 1)")  # up from the start corner is always the outer wall
    assert (bump["reward"], bump["done"]) == (0.0, False)
    assert "Cannot move into a wall." in bump["observations"][0]["content"][1]["text"]
    outputs = [env.step(answer) for answer in _oracle_answers(maze)]
    assert all(o["reward"] == 0.0 and not o["done"] and len(o["observations"]) == 1 for o in outputs[:-1])
    agent_pixel = (maze.target[1] * 25 + 12, maze.target[0] * 25 + 12)
    assert _image_of(outputs[-2]["observations"][0]).getpixel(agent_pixel) == AGENT_RGB
    last = outputs[-1]
    assert last["done"] and last["observations"] == []
    assert last["reward"] == pytest.approx(1.0)
    assert last["metadata"]["task_reward"] == 1.0 and last["metadata"]["format_ok"]
    assert env.turns == len(outputs) + 1
    metrics = env.get_metrics()
    assert metrics == {"turns": env.turns, "solved": True, "format_score": 1.0}
    assert MazeEnv.aggregate_metrics([metrics, {"turns": 15, "solved": False, "format_score": 0.5}]) == {
        "turns": (env.turns + 15) / 2,
        "solved": 0.5,
        "format_score": 0.75,
    }


def test_a_turn_cost_from_the_rows_extras_charges_a_solved_episode_for_its_turns(tmp_path):
    path = tmp_path / "train.jsonl"
    write_training_dataset(path, n=1, size=9, max_turns=31, turn_cost=0.02)
    row = json.loads(path.read_text())
    assert row["turn_cost"] == 0.02
    env = MazeEnv(extras=_extras(row))
    env.init(row["prompt"])
    last = [env.step(answer) for answer in _oracle_answers(env.episode.maze)][-1]
    assert last["done"] and env.episode.solved
    assert last["reward"] == pytest.approx(0.8 * (1 - 0.02 * env.episode.turns) + 0.2)


@pytest.mark.parametrize("bad", ["0.02", True, None])
def test_a_turn_cost_that_is_not_a_number_is_refused(bad):
    with pytest.raises(ValueError, match="'turn_cost' must be a number"):
        MazeEnv(extras={"seed": 1, "turn_cost": bad})
    with pytest.raises(ValueError, match="turn_cost must be >= 0"):
        MazeEnv(extras={"seed": 1, "max_turns": 31, "turn_cost": 0.05})


def test_episode_ends_at_max_turns_from_extras():
    env = MazeEnv(extras={"seed": 5, "size": 9, "max_turns": 3})
    env.init([])
    outputs = [env.step("not an action") for _ in range(3)]
    assert [o["done"] for o in outputs] == [False, False, True]
    assert outputs[-1]["reward"] == 0.0 and outputs[-1]["observations"] == []
    assert "Invalid answer" in outputs[0]["observations"][0]["content"][1]["text"]


def test_training_dataset_rows(tmp_path):
    path = tmp_path / "data" / "train.jsonl"
    assert write_training_dataset(path, n=8, size=11, max_turns=12) == 8
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["seed"] for r in rows] == training_seeds(8, size=11)
    for row in rows:
        assert set(row) == {"prompt", "env_class", "seed", "size", "max_turns"}  # no turn_cost: VisGym's reward
        assert row["env_class"] == "maze2d" and row["size"] == 11 and row["max_turns"] == 12
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert all(isinstance(m["content"], str) for m in row["prompt"])
        assert MazeEnv(extras=_extras(row)).episode.maze == generate_maze(11, row["seed"])


@pytest.mark.parametrize(
    ("kwargs", "size", "max_turns"),
    [({}, 9, 31), ({"size": 7}, 7, 17), ({"size": 9, "max_turns": 15}, 9, 15)],
)
def test_eval_dataset_rows(tmp_path, kwargs, size, max_turns):
    path = tmp_path / "val.jsonl"
    assert write_eval_dataset(path, **kwargs) == 64
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["seed"] for r in rows] == list(range(64))
    assert {(r["size"], r["max_turns"]) for r in rows} == {(size, max_turns)}


def test_eval_dataset_needs_a_fixed_set_of_its_size(tmp_path):
    with pytest.raises(NoEvalSet, match="5x5"):
        write_eval_dataset(tmp_path / "val.jsonl", size=5)


@pytest.mark.parametrize(
    ("name", "size", "max_turns", "error"),
    [("train.parquet", 9, 15, ".jsonl"), ("train.jsonl", 8, 15, "size"), ("train.jsonl", 9, 0, "max_turns")],
)
def test_dataset_arguments_are_validated(tmp_path, name, size, max_turns, error):
    with pytest.raises(ValueError, match=error):
        write_prompt_dataset(tmp_path / name, [1_000_000], size, max_turns)
