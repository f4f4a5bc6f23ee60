# maze-rl-ops developer entry points. `make local` and `make test` each set up the machine first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup tools browser local test test-fast test-research lint bench clean

setup: $(STAMP)

# The reviewers' tools, each in a virtual environment of its own: aws-sam-cli pins boto3 1.43 and
# click 8.1, checkov pins boto3 1.35, packaging < 24 and networkx < 2.7; neither fits beside the
# project's pins (boto3 1.44, click 8.5, packaging 26 and networkx 3 for torch), nor beside the other.
TOOLS := .venv-sam/.installed .venv-checkov/.installed
tools: $(TOOLS)

.venv-%/.installed: requirements-%.lock
	$(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip install --quiet -r $<
	touch $@

# Chromium for the ops console's browser tests: Debian's package (Playwright drives it by its path;
# Playwright's own browser download is not reachable from CI). Installed with apt-get when missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; }

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

## Run the whole pipeline on the embedded local stack (moto server + local Ray head).
local: setup
	$(PY) -m local_stack.pipeline

# Two pytest workers (CI's cores), one test module each at a time: a module's local stack and Ray
# head stay in one process. Modules start in tests/conftest.py's order, longest first (xdist would
# otherwise order them by their number of tests and start the e2e module last). Measured on fresh
# 2-core clones (2026-12-07): 1372-1373 tests in 7m35s to 10m43s, as the host's speed varied (8m42s to
# 12m41s of CPU for the same work); the e2e module alone, with its real GRPO training, about 5.5 min.
PYTEST := $(PY) -m pytest --numprocesses 2 --dist loadfile --no-loadscope-reorder

## Lint and format check (ruff, pinned in requirements.lock; settings in pyproject.toml).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

## Run the test suite (end-to-end tests included; they are marked `slow`).
test: setup tools browser lint
	$(PYTEST)

## The suite without the slow end-to-end tests.
test-fast: setup tools
	$(PYTEST) -m "not slow"

## The research tools' tests (research/; not part of `make test`).
test-research: setup
	$(PY) -m pytest --numprocesses 2 research/tests

bench: setup
	$(PY) -m benchmarks.control_plane

clean:
	rm -rf $(VENV) .venv-sam .venv-checkov .local-stack .pytest_cache
