"""The base every spec model shares: frozen, strict, no unknown keys, and how
cross-field checks report their problems.

Kept apart from :mod:`.spec_models` so that the search models in
:mod:`.spec_search` and the core models can both build on it without a cycle.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


class _Problems(ValueError):
    """Errors found by a model validator, as (path relative to that model, message)."""

    def __init__(self, errors: list[tuple[tuple[str | int, ...], str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(m for _, m in errors))


class _Model(BaseModel):
    # strict: no "3" -> 3 or True -> 1 coercion; ints are still accepted for floats.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)


Finite = Annotated[float, Field(allow_inf_nan=False)]


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def _duration(value: object) -> object:
    """``90``, ``"90s"``, ``"30m"``, ``"2h"``, ``"1d"``, ``"1h30m"`` -> seconds."""
    if isinstance(value, str):
        m = _DURATION.fullmatch(value.strip())
        if not value.strip() or m is None:
            raise ValueError(f"must be seconds or a duration like 90s, 30m, 2h, 1h30m (got {value!r})")
        d, h, mi, se = (float(g) if g else 0.0 for g in m.groups())
        return d * 86400 + h * 3600 + mi * 60 + se
    return value


Duration = Annotated[float, BeforeValidator(_duration), Field(gt=0, allow_inf_nan=False)]
