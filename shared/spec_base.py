"""The base every spec model shares: frozen, strict, no unknown keys, and how
cross-field checks report their problems.

Kept apart from :mod:`.spec_models` so that the search models in
:mod:`.spec_search` and the core models can both build on it without a cycle.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class _Problems(ValueError):
    """Errors found by a model validator, as (path relative to that model, message)."""

    def __init__(self, errors: list[tuple[tuple[str | int, ...], str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(m for _, m in errors))


class _Model(BaseModel):
    # strict: no "3" -> 3 or True -> 1 coercion; ints are still accepted for floats.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)


Finite = Annotated[float, Field(allow_inf_nan=False)]
