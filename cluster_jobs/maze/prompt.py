"""The chat messages the policy sees: a system prompt and one user message per observation.

Messages use the OpenAI chat shape with image parts as base64 PNG data URIs, which SkyRL's
vision-language generator, Ray Serve LLM and the evaluator all consume unchanged.
"""

from __future__ import annotations

from typing import Any

from cluster_jobs.maze.env import Observation
from cluster_jobs.maze.render import image_to_data_uri

SYSTEM_PROMPT = """You are navigating a 2D maze shown as an image.
The maze consists of walls (gray) and paths (white). You are represented by a blue circle, \
and your goal is to reach the red target square.

Available actions:
1. 'move': Move one cell in one of four directions. Format: ('move', direction) where direction is an integer:
   - 0=right, 1=up, 2=left, 3=down
   Moving into a wall does nothing.
2. 'stop': End the navigation session. Format: ('stop', 'stop')

Success: you succeed only if you answer ('stop', 'stop') while standing on the red target square. \
Every answer uses one turn and turns are limited.

Each turn, first describe what you see inside <observation>...</observation>, explain your choice \
inside <justification>...</justification>, then give exactly one action inside <action>...</action>, \
for example <action>('move', 0)</action>. Do not use backticks or code blocks."""

FIRST_TURN_TEXT = "Here is the maze."
NEXT_TURN_TEXT = "Here is the current state of the maze."


def observation_message(obs: Observation, first: bool) -> dict[str, Any]:
    """The user message for ``obs``: the image, then the feedback text.

    ``first`` marks the episode's opening message; later messages lead with the feedback on the
    previous answer.
    """
    text = f"{FIRST_TURN_TEXT} {obs.text}" if first else f"{obs.text} {NEXT_TURN_TEXT}"
    return {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": image_to_data_uri(obs.image)}},
            {"type": "text", "text": text},
        ],
    }
