"""Shadow: a candidate agent on production's own traffic, run by run, before a release.

- ``_select``: which stored runs (the store's filters, cases' runs left out, a shard, a stratified sample), streamed.
- ``_change``: one production run against the candidate's replay of it (``RunChange``).
- ``_tally``: how many runs changed in each way, per scope, with confidence intervals.
- ``_report``: the shadow report, its five lines, merging shards; ``_gates``: gates on its figures.
- ``_propose``: a run that changed for the worse as a pending case; ``_html``: the page.
- ``_run``: ``shadow``, the runs through the replay runner in batches.
"""

from ._change import RunChange, compare, run_key
from ._gates import judge, parse_gates
from ._html import html
from ._report import SCHEMA, ShadowReport, is_shadow_report, merge
from ._run import shadow, shadow_case
from ._select import Selection, production_runs
from ._tally import FLAGS, METRICS, Tally, wilson

__all__ = [
    "FLAGS",
    "METRICS",
    "SCHEMA",
    "RunChange",
    "Selection",
    "ShadowReport",
    "Tally",
    "compare",
    "html",
    "is_shadow_report",
    "judge",
    "merge",
    "parse_gates",
    "production_runs",
    "run_key",
    "shadow",
    "shadow_case",
    "wilson",
]
