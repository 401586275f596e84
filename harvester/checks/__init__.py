"""The check library: small callables ``Run -> (passed, detail)``.

The detail always says what was seen (``issue_refund executed at step 3``), because a failing
nightly job is read by someone who was not there. Declarative specs in case files
(``{"check": "max_steps", "n": 4}``) go through the registry, so users can add their own checks.

- ``_base``: ``Check``, the registry (``register``, ``REGISTRY``, ``from_spec``), ``run_check``, ``label``.
- ``_answer``: what the agent said (answered, contains, excludes, valid_json, abstained).
- ``_path``: which tools ran, in what order, steps, cost and the stop (used_tools, never_used, call_order, ...).
- ``_trajectory``: ``trajectory_match``, the run's calls against a reference list of calls.

Each module registers its built-in factories when it loads; this facade loads them all.
"""

from ._answer import DEFAULT_ABSTAIN_MARKERS, abstained, answered, contains, excludes, valid_json
from ._base import REGISTRY, Check, CheckFn, from_spec, label, register, run_check
from ._path import (
    awaiting,
    call_order,
    max_cost,
    max_steps,
    min_steps,
    never_requested,
    never_used,
    stopped_with,
    trajectory_is,
    used_tools,
)
from ._trajectory import ARGS_MODES, MODES, trajectory_match

__all__ = [
    "ARGS_MODES",
    "DEFAULT_ABSTAIN_MARKERS",
    "MODES",
    "REGISTRY",
    "Check",
    "CheckFn",
    "abstained",
    "awaiting",
    "answered",
    "call_order",
    "contains",
    "excludes",
    "from_spec",
    "label",
    "max_cost",
    "max_steps",
    "min_steps",
    "never_requested",
    "never_used",
    "register",
    "run_check",
    "stopped_with",
    "trajectory_is",
    "trajectory_match",
    "used_tools",
    "valid_json",
]
