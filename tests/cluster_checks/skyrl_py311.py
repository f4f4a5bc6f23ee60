"""Make skyrl 0.4.0 importable on Python 3.11 (the tool venv's interpreter); import this before skyrl.

skyrl 0.4.0 declares Requires-Python >= 3.12, and on 3.11 one thing stops its import: pydantic 2 refuses a
``typing.TypedDict`` field type before Python 3.12 ("Please use `typing_extensions.TypedDict` instead of
`typing.TypedDict` on Python < 3.12", pydantic 2.14 _generate_schema.py), and skyrl/tinker/types.py (imported
by ``skyrl.backends`` and so by ``skyrl.train.utils``) declares its TypedDicts with ``typing``. On 3.11
``typing_extensions.TypedDict`` is the same construct with the metadata pydantic needs, so it stands in for
``typing.TypedDict`` here. Every other module of skyrl 0.4.0 imports unchanged on 3.11.
"""

from __future__ import annotations

import sys
import typing

import typing_extensions

if sys.version_info < (3, 12):
    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]
