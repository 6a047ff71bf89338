"""The one error type for a run that cannot start as configured (bad data, device, shapes, checkpoint)."""

from __future__ import annotations


class SetupError(ValueError):
    """The run cannot start as asked; the message names the flag or file to fix."""
