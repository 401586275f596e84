"""The replay runner: a fresh agent per case and trial, tools served from fixtures, every check
evaluated, one report.

- ``_agent``: loading the ``--agent module:attr`` factory.
- ``_trial``: one case-trial on its own thread, root span and executor.
- ``_observe``: the run read from the trial's spans (as production reads them), or from its answer.
- ``_live``: the hermetic cross-check, calls that went around the executor.
- ``_models``: the recorded model (``--model recorded``), a case's model fixtures answering its model
  calls in order; ``_drift``: how a live request differs from the recorded one, named.
- ``_sandbox``: the tools ``--sandbox`` runs for real, and their answers compared with the recording.
- ``_evaluate``: the checks, the judge, the recording's checks, recovery variants.
- ``_plan``: which cases run, a small record each until its turn; ``_results``: trials folded into a
  ``CaseResult``, handed on as a ``Finished`` case; ``_suite``: the scheduler, ``replay`` (results to
  disk as cases finish).
"""

from ._agent import also_allowing, importing_sealed, load_agent, refused_after_replay
from ._evaluate import Judge, divergence, evaluate, recovered, variant_case
from ._live import LiveCall, live_calls
from ._plan import FolderPlan, Planned, in_shard, plan, plan_folder, recovery_variants
from ._reach import plan_hosts
from ._results import CaseSink, Finished
from ._sandbox import Sandbox, sandbox_for
from ._suite import DEFAULT_CONCURRENCY, INJECT_NEEDS_A_MODEL, Progress, Suite, replay

__all__ = [
    "also_allowing",
    "importing_sealed",
    "DEFAULT_CONCURRENCY",
    "FolderPlan",
    "INJECT_NEEDS_A_MODEL",
    "CaseSink",
    "Finished",
    "Judge",
    "LiveCall",
    "Planned",
    "Progress",
    "Sandbox",
    "Suite",
    "divergence",
    "evaluate",
    "in_shard",
    "live_calls",
    "load_agent",
    "plan",
    "plan_folder",
    "plan_hosts",
    "recovered",
    "refused_after_replay",
    "replay",
    "sandbox_for",
    "variant_case",
    "recovery_variants",
]
