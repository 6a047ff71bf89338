"""spotsweep: hyperparameter sweeps on spot GPUs.

The control plane (planner, collector, reporter, CLI) lives in
``spotsweep.services``; common code (schemas, queue topology, ports) in
``spotsweep.shared``; the torch harness in ``spotsweep.trainer``.
Trial scripts use ``from spotsweep import trial``; notebooks read results
with ``spotsweep.results()`` (:mod:`spotsweep.analysis`: pandas DataFrames).
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "results", "trial"]


def __getattr__(name: str) -> Any:
    # Lazy so that importing the package (e.g. for the CLI) does not read the
    # trial environment of the process.
    if name == "trial":
        return import_module("spotsweep.trial")
    if name == "results":  # a function in its own module: `spotsweep.results` stays callable once imported
        return import_module("spotsweep.analysis").results
    raise AttributeError(name)
