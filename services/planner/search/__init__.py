"""The planner's search decisions: pure objects, no I/O, no clock.

The planner builds one :class:`Search` per sweep from its spec and calls it
with plain values read from its database (:class:`TrialRecord`). Samplers and
stoppers come from :mod:`.registry` by the spec's types, never from a switch
on them. docs/search.md tells the strategies, what the planner persists and
sends, and how to add a strategy or a stopper.
"""

from spotsweep.services.planner.search.budget import Usage, Verdict, committed, estimate_trial_seconds
from spotsweep.services.planner.search.budget import estimate_unit_seconds, may_continue, may_launch
from spotsweep.services.planner.search.budget import committed_steps, estimate_trial_steps, trial_steps
from spotsweep.services.planner.search.history import TrialRecord, objective_names, objective_values
from spotsweep.services.planner.search.median import Median
from spotsweep.services.planner.search.model import GP_NEEDS_TORCH, ModelSearch, Suggestion
from spotsweep.services.planner.search.registry import Sampler, Stopper, register_sampler, register_stopper
from spotsweep.services.planner.search.rungs import Action, Asha, Promotion, StepDecision, bracket_rungs
from spotsweep.services.planner.search.smoke import SmokeDecision, smoke_stage
from spotsweep.services.planner.search.strategy import Proposal, Search

__all__ = [
    "GP_NEEDS_TORCH",
    "Action",
    "Asha",
    "Median",
    "ModelSearch",
    "Promotion",
    "Proposal",
    "Sampler",
    "Search",
    "SmokeDecision",
    "StepDecision",
    "Stopper",
    "Suggestion",
    "TrialRecord",
    "Usage",
    "Verdict",
    "bracket_rungs",
    "committed",
    "committed_steps",
    "estimate_trial_seconds",
    "estimate_trial_steps",
    "estimate_unit_seconds",
    "may_continue",
    "may_launch",
    "objective_names",
    "objective_values",
    "register_sampler",
    "register_stopper",
    "smoke_stage",
    "trial_steps",
]
