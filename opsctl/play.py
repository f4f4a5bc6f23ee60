"""`play`: watch the live serving endpoint play one maze of the fixed evaluation set, and save its path as a PNG.

The maze is played by the evaluation's rollout code, each turn printed as it is played.
"""

from __future__ import annotations

import argparse
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster_jobs.maze.env import MazeEpisode
from cluster_jobs.maze.eval_set import EVAL_SET_SIZE, EvalSet, NoEvalSet, eval_set_for_size
from cluster_jobs.maze.generator import Maze, Position
from cluster_jobs.rollout import HISTORY_TURNS_BY_ENGINE, Episode, Generate, run_episodes
from mazeops.champion_rows import champion_model_id
from mazeops.names import parse_adapter_name, validate_base_model_id
from mazeops.registry import Registry
from mazeops.serve_client import ServeUnavailable
from opsctl.commands import add_command
from opsctl.errors import OpsError
from opsctl.path_png import draw_path
from opsctl.target import Target

# As in the evaluation (cluster_jobs.evaluate.backends.DEFAULT_MAX_NEW_TOKENS; not imported: that module loads
# transformers). 512 is also the local serve app's max_tokens limit.
ANSWER_MAX_TOKENS = 512
REQUEST_TIMEOUT_S = 300  # one answer; a CPU model on the local stack can take minutes
MAX_ERROR_DETAIL_CHARS = 300

EPILOG = """examples:
  mazeops-ops play --model qwen3-vl-8b-sft:maze-grpo-1-step40 --seed 7 --local --out seed7.png
  mazeops-ops play --champion --base-model qwen3-vl-8b-sft --stack maze-rl-ops
  mazeops-ops play --model qwen3-vl-8b-sft --size 7 --seed 3 --max-turns 40 --local

The maze is the one of that seed in the fixed evaluation set; answers are greedy (temperature 0).
The exit status is 0 whether or not the maze is solved; errors print one line and exit 2.
"""


def parse_model_id(model_id: str) -> str:
    """`model_id` if it is `<base>` or `<base>:<adapter>` with valid names; InvalidName otherwise."""
    base, separator, adapter = model_id.partition(":")
    validate_base_model_id(base)
    if separator:
        parse_adapter_name(adapter)
    return model_id


def champion_served_id(registry: Registry, base_model_id: str) -> str:
    """The served model id of the champion of `base_model_id`: `<base>:<adapter>`, or `<base>` when the
    baseline (the base model itself) is the champion.

    Raises:
        OpsError: no adapter was ever promoted and no baseline evaluation of the base model is READY.
    """
    base = validate_base_model_id(base_model_id)
    pointer = registry.get_champion(base)
    if pointer is None and not any(baseline.status == "READY" for baseline in registry.list_baselines(base)):
        raise OpsError(
            f"base model {base!r} has no champion yet: no adapter was promoted and no baseline evaluation is ready"
        )
    return champion_model_id(base, pointer)


def eval_maze(eval_set: EvalSet, seed: int) -> Maze:
    """The maze of `seed` in `eval_set`; OpsError when the set has no such seed."""
    if seed not in eval_set.seeds:
        raise OpsError(
            f"seed {seed} is not in the evaluation set {eval_set.name} "
            f"(seeds {min(eval_set.seeds)}..{max(eval_set.seeds)}, size {eval_set.size})"
        )
    return eval_set.mazes[eval_set.seeds.index(seed)]


def chat_completion(
    serve_url: str,
    model_id: str,
    messages: list[dict],
    max_tokens: int = ANSWER_MAX_TOKENS,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> str:
    """The greedy answer of `model_id` at `serve_url` to `messages` (OpenAI chat completions).

    Raises:
        OpsError: HTTP 404 (the endpoint does not serve `model_id`), another 4xx, or an answer that is
            not a chat completion.
        ServeUnavailable: the endpoint cannot be reached, timed out or answered 5xx.
    """
    url = serve_url.rstrip("/") + "/v1/chat/completions"
    body = {"model": model_id, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as error:
        detail = _error_detail(error.read(4096))
        if error.code == 404:
            raise OpsError(f"unknown model {model_id!r}: {url} answered HTTP 404: {detail}") from None
        if error.code >= 500:
            raise ServeUnavailable(f"{url} answered HTTP {error.code} for {model_id!r}: {detail}") from None
        raise OpsError(f"{url} refused the chat for {model_id!r} with HTTP {error.code}: {detail}") from None
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as error:
        raise ServeUnavailable(f"cannot reach the serve endpoint {url}: {getattr(error, 'reason', error)}") from None
    return _answer_text(raw, model_id)


def _error_detail(raw: bytes) -> str:
    """The message of an OpenAI error body (`{"error": {"message"}}` or `{"message"}`), else the raw text, cut short."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return text[:MAX_ERROR_DETAIL_CHARS] or "(no body)"
    error = document.get("error") if isinstance(document, dict) else None
    holder = error if isinstance(error, dict) else document
    message = holder.get("message") if isinstance(holder, dict) else None
    return (message if isinstance(message, str) and message else text)[:MAX_ERROR_DETAIL_CHARS]


def _answer_text(raw: bytes, model_id: str) -> str:
    """The first choice's message content of a chat completion; OpsError when there is none."""
    try:
        completion = json.loads(raw)
        content = completion["choices"][0]["message"]["content"]
    except (UnicodeDecodeError, json.JSONDecodeError, LookupError, TypeError):
        content = None
    if not isinstance(content, str):
        raise OpsError(f"the answer for {model_id!r} is not a chat completion: {raw[:200]!r}")
    return content


def endpoint_generate(serve_url: str, model_id: str) -> Generate:
    """A `run_episodes` generate function asking `model_id` at `serve_url`, one request per chat."""

    def generate(chats: list[list[dict]]) -> list[str]:
        return [chat_completion(serve_url, model_id, chat) for chat in chats]

    return generate


def say(line: str) -> None:
    """Print one line at once (how a played turn is shown by default)."""
    print(line, flush=True)


@dataclass
class TurnPrinter:
    """A `run_episodes` turn callback for one maze: replays each new answer on a twin episode, shows the
    turn with `echo` (three lines) and records the agent's cells (`positions`, the start first)."""

    twin: MazeEpisode
    positions: list[Position] = field(default_factory=list)
    echo: Callable[[str], None] = say

    def __post_init__(self) -> None:
        self.positions.append(self.twin.agent)

    def __call__(self, turn: int, episodes: list[Episode]) -> None:
        for answer in episodes[0].actions[self.twin.turns :]:
            before = self.twin.agent
            result = self.twin.step(answer)
            self.positions.append(self.twin.agent)
            self.echo(f"turn {self.twin.turns}/{self.twin.max_turns}: agent {before} -> {self.twin.agent}")
            self.echo(f"  answer:   {' '.join(answer.split()) or '(empty)'}")
            self.echo(f"  feedback: {result.observation.text}")


def outcome_text(episode: Episode, shortest_path: int) -> str:
    """`solved in N turns (shortest path M moves)` or `not solved after N turns (...)`."""
    verdict = f"solved in {episode.turns} turns" if episode.solved else f"not solved after {episode.turns} turns"
    return f"{verdict} (shortest path {shortest_path} moves)"


def history_turns(target: Target) -> int | None:
    """The conversation the deployment's evaluation shows its models (by its EVAL_BACKEND), which playing repeats.

    Raises:
        OpsError: the stack names an evaluation backend this tool does not know.
    """
    engine = target.lambda_settings.get("EVAL_BACKEND") or "vllm"
    if engine not in HISTORY_TURNS_BY_ENGINE:
        raise OpsError(f"the stack's EVAL_BACKEND {engine[:40]!r} is none of {', '.join(HISTORY_TURNS_BY_ENGINE)}")
    return HISTORY_TURNS_BY_ENGINE[engine]


def play_maze(
    serve_url: str,
    model_id: str,
    maze: Maze,
    max_turns: int,
    history: int | None,
    echo: Callable[[str], None] = say,
) -> tuple[Episode, list[Position]]:
    """Play `maze` with `model_id` at `serve_url`, each prompt carrying `history` earlier turns (None: all), showing
    each turn with `echo`; the episode and the agent's cells."""
    printer = TurnPrinter(MazeEpisode(maze, max_turns=max_turns), echo=echo)
    generate = endpoint_generate(serve_url, model_id)
    (episode,) = run_episodes(generate, [maze], max_turns, history_turns=history, on_turn=printer)
    return episode, printer.positions


def command(args: argparse.Namespace, target: Target) -> int:
    """Resolve the model, play the maze turn by turn, print the outcome and write the path PNG."""
    if args.champion:
        if not args.base_model:
            raise OpsError("--champion needs --base-model BASE_MODEL_ID")
        model_id = champion_served_id(Registry(target.client("dynamodb"), target.registry_table), args.base_model)
    else:
        if args.base_model:
            raise OpsError("--base-model goes with --champion; with --model, name <base>:<adapter> instead")
        model_id = parse_model_id(args.model)
    try:
        eval_set = eval_set_for_size(args.size)
    except NoEvalSet as error:
        raise OpsError(str(error)) from None
    maze = eval_maze(eval_set, args.seed)
    max_turns = args.max_turns or eval_set.max_turns
    shortest = maze.shortest_path_length()
    serve_url = target.serve_url
    print(
        f"playing maze seed {maze.seed} (size {maze.size}, shortest path {shortest} moves, at most {max_turns} "
        f"turns) with {model_id} at {serve_url}",
        flush=True,
    )
    episode, positions = play_maze(serve_url, model_id, maze, max_turns, history_turns(target))
    outcome = outcome_text(episode, shortest)
    print(f"outcome: {outcome}")
    if episode.error:
        print(f"last malformed answer: {episode.error}")
    out = Path(args.out or f"play-size{maze.size}-seed{maze.seed}.png")
    picture = draw_path(maze, positions, f"{model_id}\nseed {maze.seed}, size {maze.size}: {outcome}")
    try:
        picture.save(out, format="PNG")
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise OpsError(f"cannot write {str(out)[:200]!r}: {getattr(error, 'strerror', None) or error}") from None
    print(f"wrote {out}")
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def register(commands: argparse._SubParsersAction, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Add the `play` command."""
    parser = add_command(
        commands,
        "play",
        command,
        parents,
        "watch the serving endpoint play one evaluation maze; PNG of its path",
        EPILOG,
        description="Play one maze of the fixed evaluation set with a served model (greedy, through the live "
        "OpenAI-compatible endpoint), print each turn and the outcome, and write a PNG of the agent's path.",
    )
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", metavar="MODEL_ID", help="<base> or <base>:<adapter>, as served")
    model.add_argument("--champion", action="store_true", help="the champion of --base-model")
    parser.add_argument("--base-model", metavar="BASE_MODEL_ID", help="with --champion: whose champion")
    parser.add_argument("--seed", type=int, default=0, help="the maze's seed in the evaluation set (default 0)")
    parser.add_argument(
        "--size", type=int, default=EVAL_SET_SIZE, metavar="S", help="maze size of the set (default %(default)s)"
    )
    parser.add_argument(
        "--max-turns", type=_positive_int, metavar="T", help="turn budget (default: the evaluation set's)"
    )
    parser.add_argument("--out", metavar="PNG", help="where to write the PNG (default play-size<S>-seed<N>.png)")
