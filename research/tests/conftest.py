"""The research tests' fixtures: the product suite's own (`make test-research` runs them)."""

import os

from tests.fixtures_models import one_torch_thread  # noqa: F401 (a fixture, used by name)

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as tests/conftest.py: idle OpenMP threads spin otherwise
