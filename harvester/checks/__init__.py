"""The check library: small callables ``Run -> (passed, detail)``.

The detail always says what was seen (``issue_refund executed at step 3``), because a failing
nightly job is read by someone who was not there. Declarative specs in case files
(``{"check": "max_steps", "n": 4}``) go through the registry, so users can add their own checks.

- ``_base``: ``Check``, the registry (``register``, ``REGISTRY``, ``from_spec``), ``run_check``, ``label``.
- ``_answer``: what the agent said (answered, contains, excludes, valid_json, abstained).
- ``_path``: which tools ran, steps, cost and the stop (used_tools, never_used, trajectory_is, ...).
- ``_trajectory``: ``trajectory_match``, the run's calls against a reference list of calls.
- ``_order``: ``call_order``, a call only after the calls it needs.
- ``_judge``: judges, a function or a model asked one question about an answer (``build_judge``).
- ``_verdicts``: the verdict cache under ``.harvester/``; ``_panel``: the judges of one command, counted.
- ``_agreement``: a judge against human labels (kappa, Wilson intervals) and the calibration record.
- ``_life``: ``HarvestedCheck``, the life cycle of a check harvest proposes: how it is proposed from a
  run, kept by a rerecord, edited in review and shown. ``HARVESTED`` below is their table.

Each module registers its built-in factories when it loads; this facade loads them all.
"""

from collections.abc import Sequence

from ._agreement import Agreement, Disagreement, calibration_problem, read_calibrations, save_calibration, wilson
from ._answer import DEFAULT_ABSTAIN_MARKERS, abstained, answered, contains, excludes, valid_json
from ._base import REGISTRY, Check, CheckFn, from_spec, label, register, run_check
from ._judge import BuiltJudge, Subject, Verdict, build_judge
from ._life import CHECKS, Ask, HarvestedCheck, RecordedCall, Recording, Spec, held, placed
from ._order import HarvestedCallOrder, call_order, order_text
from ._panel import Panel, Tally
from ._path import (
    awaiting,
    max_cost,
    max_steps,
    min_steps,
    never_requested,
    never_used,
    stopped_with,
    trajectory_is,
    used_tools,
)
from ._trajectory import ARGS_MODES, MODES, HarvestedTrajectoryMatch, trajectory_match, trajectory_reference
from ._verdicts import VerdictCache, judging_dir

# The checks harvest proposes, a rerecord keeps, review edits and a case shows: one line each, in the
# order review offers them (and a harvested case's checks list them).
HARVESTED: Sequence[HarvestedCheck] = [
    HarvestedTrajectoryMatch(),
    HarvestedCallOrder(),
]

__all__ = [
    "Agreement",
    "BuiltJudge",
    "Disagreement",
    "Panel",
    "Subject",
    "Tally",
    "Verdict",
    "VerdictCache",
    "build_judge",
    "calibration_problem",
    "judging_dir",
    "read_calibrations",
    "save_calibration",
    "wilson",
    "ARGS_MODES",
    "CHECKS",
    "DEFAULT_ABSTAIN_MARKERS",
    "HARVESTED",
    "MODES",
    "REGISTRY",
    "Ask",
    "Check",
    "CheckFn",
    "HarvestedCallOrder",
    "HarvestedCheck",
    "HarvestedTrajectoryMatch",
    "RecordedCall",
    "Recording",
    "Spec",
    "abstained",
    "awaiting",
    "answered",
    "call_order",
    "contains",
    "excludes",
    "from_spec",
    "held",
    "label",
    "max_cost",
    "max_steps",
    "min_steps",
    "never_requested",
    "never_used",
    "order_text",
    "placed",
    "register",
    "run_check",
    "stopped_with",
    "trajectory_is",
    "trajectory_match",
    "trajectory_reference",
    "used_tools",
    "valid_json",
]
