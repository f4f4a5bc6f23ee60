"""SkyRL 0.4.0's VLM generator plays the maze env, as on the cluster, with a scripted engine in vLLM's place.

Request on stdin: ``{"overrides": [...], "tokenizer_dir": dir, "rows": [dataset rows]}``. The overrides go through
SkyRL's loader and ``validate_cfg``; the maze env is registered as the job's entrypoint registers it; the generator
is the class ``BasePPOExp.get_generator`` picks for ``generator.vision_language_generator=true``
(``SkyRLVLMGymGenerator``, whose constructor checks the generator config), fed through SkyRL's
``prepare_generator_input`` with the rows split as skyrl/train/dataset/dataset.py ``PromptDataset`` splits them
(``prompt``, ``env_class``, every other column as env extras). The engine renders each conversation with the
model's chat template (no image features: a rendered image needs vLLM) and answers with the maze oracle, so every
episode should be solved. Prints ``{"ok", "error", "rewards", "stop_reasons", "env_metrics", "turns"}``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import skyrl_py311  # noqa: F401 (before skyrl)
from check_io import describe, read_request, write_result
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.generators.base import TRAINING_PHASE_TRAIN
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.train.generators.utils import prepare_generator_input
from skyrl.train.utils import validate_cfg
from transformers import AutoTokenizer

from cluster_jobs.maze.oracle import oracle_answer
from cluster_jobs.maze.skyrl_env import register_maze_env


class OracleEngine:
    """The parts of SkyRL's inference client the VLM generator calls, answering with the maze oracle."""

    model_name = "policy"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.conversations: dict[tuple[int, ...], list[dict[str, Any]]] = {}
        self.turns = 0

    async def render_chat_completion(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["json"]["messages"]
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        self.conversations[tuple(ids)] = messages
        return {"token_ids": ids, "features": None}

    async def generate(self, engine_input: dict[str, Any], model: str | None = None) -> dict[str, Any]:
        self.turns += 1
        answer = oracle_answer(self.conversations[tuple(engine_input["prompt_token_ids"][0])])
        ids = self.tokenizer.encode(answer, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return {"responses": [answer], "response_ids": [ids], "stop_reasons": ["stop"], "response_logprobs": None}

    async def finish_session(self, session_id: str) -> None:
        return None


def play(request: dict[str, Any]) -> dict[str, Any]:
    """Generate one trajectory per row (n_samples_per_prompt of them) and report rewards and metrics."""
    cfg = SkyRLTrainConfig.from_cli_overrides(request["overrides"])
    validate_cfg(cfg)
    register_maze_env()
    tokenizer = AutoTokenizer.from_pretrained(request["tokenizer_dir"])
    engine = OracleEngine(tokenizer)
    generator = SkyRLVLMGymGenerator(cfg.generator, cfg.environment.skyrl_gym, engine, tokenizer)
    prompts = []
    for index, row in enumerate(request["rows"]):
        row = dict(row)
        prompt, env_class = row.pop("prompt"), row.pop("env_class", None)
        prompts.append({"prompt": prompt, "env_class": env_class, "env_extras": row, "uid": str(index)})
    batch, _ = prepare_generator_input(
        prompts, cfg.generator.n_samples_per_prompt, None, cfg.environment.env_class, TRAINING_PHASE_TRAIN, 0
    )
    output = asyncio.run(generator.generate(batch, disable_tqdm=True))
    return {
        "ok": True,
        "rewards": output["rewards"],
        "stop_reasons": output["stop_reasons"],
        "env_metrics": output.get("env_metrics"),
        "turns": engine.turns,
    }


def main() -> None:
    try:
        result = play(read_request())
    except Exception as error:  # the library's own refusal, reported to the test
        result = {"ok": False, "error": describe(error)}
    write_result(result)


if __name__ == "__main__":
    main()
