"""Stage 4, plan: a spec and a strategy -> what each generated Function computes, saves and returns.

``strategy`` makes a spec's ``ModulePlan`` (``auto`` ranks the strategies with the ``cost``
model); ``single`` and ``nested`` plan the two shapes a module takes; ``blocks`` writes what a
level computes as CSE'd statements; ``naming`` gives its temporaries readable names; ``model``
holds the frozen dataclasses the emitter prints.
"""

from .model import COMPILE_SUFFIX, LOCALS, Block, FunctionPlan, ModulePlan, Result
from .naming import MAX_NAME, Namer, temporary_names
from .strategy import (
    AUTO_CANDIDATES,
    NESTED_AUTO_CANDIDATES,
    auto_candidates,
    by_cotangents,
    choose_strategy,
    estimated_cost,
    make_plan,
)

__all__ = [
    "AUTO_CANDIDATES", "COMPILE_SUFFIX", "LOCALS", "MAX_NAME", "NESTED_AUTO_CANDIDATES", "Block", "FunctionPlan",
    "ModulePlan", "Namer", "Result", "auto_candidates", "by_cotangents", "choose_strategy", "estimated_cost", "make_plan",
    "temporary_names",
]
