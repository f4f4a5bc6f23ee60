# maze-rl-ops developer entry points. `make local` and `make test` each set up the machine first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup local test test-fast lint bench clean

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

## Run the whole pipeline on the embedded local stack (moto server + local Ray head).
local: setup
	$(PY) -m local_stack.pipeline

## Run the test suite (end-to-end tests included; they are marked `slow`).
test: setup
	$(PY) -m pytest

## The suite without the slow end-to-end tests.
test-fast: setup
	$(PY) -m pytest -m "not slow"

bench: setup
	$(PY) -m benchmarks.control_plane

clean:
	rm -rf $(VENV) .local-stack .pytest_cache
