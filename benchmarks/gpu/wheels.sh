#!/usr/bin/env bash
# The wheels the device machine lacks (it has torch, transformers and peft, not the run spec's
# pydantic): pydantic and its dependencies at requirements.lock's versions, for its Python 3.12 on
# x86_64, into .whl/ (gitignored). Run here, from the repository root, before a device call that
# carries ".whl"; that call begins with `source benchmarks/gpu/device_env.sh`.
set -euo pipefail
PINS=$(grep -E '^(pydantic|pydantic_core|annotated-types|typing-inspection)==' requirements.lock)
[ "$(wc -l <<<"$PINS")" -eq 4 ] || { echo "requirements.lock lacks one of the four pins: $PINS" >&2; exit 1; }
mkdir -p .whl
# shellcheck disable=SC2086  # one argument per pin
python3 -m pip download -q --no-deps --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --dest .whl $PINS
ls .whl
