# maze-rl-ops developer entry points. `make local` and `make test` each set up the machine first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup tools browser local test test-fast test-research lint bench clean cluster-lock cluster-wheels

setup: $(STAMP)

# The reviewers' tools, each in a virtual environment of its own: aws-sam-cli pins boto3 1.43 and
# click 8.1, checkov pins boto3 1.35, packaging < 24 and networkx < 2.7; neither fits beside the
# project's pins (boto3 1.44, click 8.5, packaging 26 and networkx 3 for torch), nor beside the other.
TOOLS := .venv-sam/.installed .venv-checkov/.installed .venv-uv/.installed .venv-uv/cluster-wheels/.downloaded \
  .venv-skyrl/.installed
tools: $(TOOLS)

.venv-%/.installed: requirements-%.lock
	$(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip install --quiet -r $<
	touch $@

# The cluster's training libraries on this machine's Python, for tests/test_cluster_libraries.py: the lock, then
# skyrl at cluster/requirements.lock's version and hashes without its dependencies (requirements-skyrl.lock says why).
.venv-skyrl/.installed: requirements-skyrl.lock cluster/requirements.lock
	$(PYTHON) -m venv .venv-skyrl
	.venv-skyrl/bin/python -m pip install --quiet -r $<
	awk '/^[^ #]/ { keep = ($$1 ~ /^skyrl==/) } keep' cluster/requirements.lock > .venv-skyrl/skyrl.txt
	.venv-skyrl/bin/python -m pip install --quiet --no-deps --ignore-requires-python --require-hashes -r .venv-skyrl/skyrl.txt
	touch $@

# The cluster image's Python environment (cluster/requirements.lock), resolved by uv (.venv-uv) for the
# cluster's platform, not this machine's: linux x86_64, CPython 3.12 (the image's), PyPI as it was on
# CLUSTER_LOCK_DATE. `make cluster-lock` rewrites the lock; tests/test_cluster_runtime.py resolves again
# offline, from the uv cache that `make tools` fills, and fails when the two differ.
CLUSTER_LOCK ?= cluster/requirements.lock
CLUSTER_LOCK_DATE := 2026-12-07T00:00:00Z
CLUSTER_LOCK_INPUTS := cluster/requirements.in cluster/overrides.txt cluster/excludes.txt
CLUSTER_COMPILE := .venv-uv/bin/uv pip compile cluster/requirements.in --overrides cluster/overrides.txt \
  --excludes cluster/excludes.txt --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
  --exclude-newer $(CLUSTER_LOCK_DATE) --generate-hashes --upgrade --no-python-downloads \
  --cache-dir .venv-uv/cache --custom-compile-command "make cluster-lock" --quiet

.venv-uv/.installed: requirements-uv.lock $(CLUSTER_LOCK_INPUTS)
	$(PYTHON) -m venv .venv-uv
	.venv-uv/bin/python -m pip install --quiet -r $<
	$(CLUSTER_COMPILE) --output-file .venv-uv/requirements.lock  # fills the cache
	touch $@

cluster-lock: .venv-uv/.installed
	$(CLUSTER_COMPILE) --output-file $(CLUSTER_LOCK)

# The wheels that tests read as source (ray, vllm and skyrl, at the lock's versions and hashes), unpacked
# beside them by tests/cluster_wheels.py; tests never download.
CLUSTER_WHEELS := .venv-uv/cluster-wheels
cluster-wheels: $(CLUSTER_WHEELS)/.downloaded
$(CLUSTER_WHEELS)/.downloaded: cluster/requirements.lock tests/cluster_wheels.py
	mkdir -p $(CLUSTER_WHEELS)
	awk '/^[^ #]/ { keep = ($$1 ~ /^(ray|vllm|skyrl)==/) } keep' $< > $(CLUSTER_WHEELS)/wanted.txt
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
	  --platform manylinux2014_x86_64 --require-hashes -r $(CLUSTER_WHEELS)/wanted.txt -d $(CLUSTER_WHEELS)
	$(PYTHON) tests/cluster_wheels.py $(CLUSTER_WHEELS)
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
# 2-core clones (2026-12-08): 1856 tests in 9m24s (13m36s with the set-up and tool venvs); 1612 tests
# took 7m41s, and 1372 tests 7m35s to 10m43s as the host's speed varied; the e2e module alone, with its
# real GRPO training, about 5.3 min.
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
	rm -rf $(VENV) .venv-sam .venv-checkov .venv-uv .venv-skyrl .local-stack .pytest_cache
