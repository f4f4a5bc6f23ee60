"""The adapter registry: adapter rows, champion pointers and baselines, in one DynamoDB table."""

from __future__ import annotations

from mazeops.adapter_rows import AdapterRows
from mazeops.baseline_rows import BaselineRows
from mazeops.champion_rows import ChampionRows


class Registry(AdapterRows, ChampionRows, BaselineRows):
    """Access to every kind of registry row through one DynamoDB client (`Registry(client, table_name)`)."""
