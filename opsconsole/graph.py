"""A state machine's graph laid out in layers, top to bottom, for drawing as inline SVG.

Only the top level of an ASL definition is drawn; edges back into a loop are curves on the right.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NODE_W = 210
NODE_H = 30
GAP_X = 26
GAP_Y = 34
MARGIN = 20


@dataclass(frozen=True)
class Node:
    """One state: its name, ASL type, box (top-left corner, size) and what the execution did there (`mark`)."""

    name: str
    kind: str
    x: int
    y: int
    mark: str  # "", "visited", "current" or "failed"


@dataclass(frozen=True)
class Edge:
    """One transition, as an SVG path (`d`), with `label` `catch` or `choice` where it is not a plain `Next`."""

    source: str
    target: str
    d: str
    label: str


@dataclass(frozen=True)
class Graph:
    """The laid-out graph, the size of its drawing and of each state's box."""

    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int
    node_width: int = NODE_W
    node_height: int = NODE_H


def transitions(state: dict[str, Any]) -> list[tuple[str, str]]:
    """(target state, label) of every transition out of one ASL state, in definition order, without repeats."""
    found: list[tuple[str, str]] = []
    if state.get("Next"):
        found.append((state["Next"], ""))
    for rule in state.get("Choices", []):
        found.append((rule["Next"], "choice"))
    if state.get("Default"):
        found.append((state["Default"], "choice"))
    for catch in state.get("Catch", []):
        found.append((catch["Next"], "catch"))
    seen: set[str] = set()
    return [(target, label) for target, label in found if not (target in seen or seen.add(target))]


def layers(definition: dict[str, Any]) -> dict[str, int]:
    """The layer of each state: the longest path to it from `StartAt` over forward edges (a depth-first search from
    `StartAt` drops the edges back into a loop); unreachable states go one below the deepest."""
    states = definition["States"]
    finished: list[str] = []
    on_path: set[str] = set()
    forward: dict[str, list[str]] = {name: [] for name in states}

    def visit(name: str) -> None:
        on_path.add(name)
        for target, _ in transitions(states[name]):
            if target not in states or target in on_path:
                continue  # an edge back into a loop (or to nowhere)
            forward[name].append(target)
            if target not in finished and target not in on_path:
                visit(target)
        on_path.discard(name)
        finished.append(name)

    visit(definition["StartAt"])
    depth = {definition["StartAt"]: 0}
    for name in reversed(finished):  # a topological order of the forward edges
        for target in forward[name]:
            depth[target] = max(depth.get(target, 0), depth[name] + 1)
    below = max(depth.values(), default=-1) + 1
    return {name: depth.get(name, below) for name in states}


def _ordered_rows(definition: dict[str, Any], depth: dict[str, int]) -> dict[int, list[str]]:
    """The states of each layer, ordered by the mean position of their parents in the layers above (fewer crossings)."""
    states = definition["States"]
    parents: dict[str, list[str]] = {name: [] for name in states}
    for name in states:
        for target, _ in transitions(states[name]):
            if target in states and depth[target] > depth[name]:
                parents[target].append(name)
    rows: dict[int, list[str]] = {}
    for name in states:
        rows.setdefault(depth[name], []).append(name)
    position: dict[str, float] = {}
    for level in sorted(rows):
        row = rows[level]
        keys = {
            name: sum(position[p] for p in parents[name]) / len(parents[name]) if parents[name] else index
            for index, name in enumerate(row)
        }
        row.sort(key=lambda name: keys[name])
        position.update({name: index - (len(row) - 1) / 2 for index, name in enumerate(row)})
    return rows


def layout(definition: dict[str, Any], marks: dict[str, str]) -> Graph:
    """Place every state of `definition` in its layer (left to right in definition order) and route the edges.

    `marks` maps state names to `visited`, `current` or `failed`; unmarked states were not entered.
    """
    states = definition["States"]
    depth = layers(definition)
    rows = _ordered_rows(definition, depth)
    widest = max(len(row) for row in rows.values())
    width = 2 * MARGIN + widest * NODE_W + (widest - 1) * GAP_X + 2 * GAP_X
    place: dict[str, tuple[int, int]] = {}
    for level, row in rows.items():
        row_w = len(row) * NODE_W + (len(row) - 1) * GAP_X
        left = (width - row_w) // 2
        for index, name in enumerate(row):
            place[name] = (left + index * (NODE_W + GAP_X), MARGIN + level * (NODE_H + GAP_Y))
    nodes = [Node(name, states[name]["Type"], *place[name], marks.get(name, "")) for name in states]
    edges = [
        Edge(name, target, _route(place[name], place[target], depth[target] > depth[name]), label)
        for name in states
        for target, label in transitions(states[name])
        if target in place
    ]
    height = 2 * MARGIN + (max(rows) + 1) * (NODE_H + GAP_Y) - GAP_Y
    return Graph(nodes, edges, width, height)


def _route(source: tuple[int, int], target: tuple[int, int], downward: bool) -> str:
    """An SVG path from the source box to the target box: a line downwards, else a curve around the right side."""
    (sx, sy), (tx, ty) = source, target
    if downward:
        return f"M{sx + NODE_W // 2},{sy + NODE_H} L{tx + NODE_W // 2},{ty}"
    start, end = (sx + NODE_W, sy + NODE_H // 2), (tx + NODE_W, ty + NODE_H // 2)
    bulge = max(start[0], end[0]) + GAP_X
    return f"M{start[0]},{start[1]} C{bulge},{start[1]} {bulge},{end[1]} {end[0]},{end[1]}"
