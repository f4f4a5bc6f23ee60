"""The base models a deployment serves: BASE_MODELS maps each base model id to its model path."""

from __future__ import annotations

from mazeops.names import validate_base_model_id


class UnknownBaseModel(LookupError):
    """The base model id is not configured in BASE_MODELS."""


def base_model_path(base_models: dict[str, str], base_model_id: str) -> str:
    """The model path configured for `base_model_id`; raise UnknownBaseModel if it is not configured."""
    validate_base_model_id(base_model_id)
    if base_model_id not in base_models:
        known = ", ".join(sorted(base_models)) or "none configured"
        raise UnknownBaseModel(f"unknown base model {base_model_id!r}; known: {known}")
    return base_models[base_model_id]
