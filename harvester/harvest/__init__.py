"""From a stored run to a reviewable regression case.

- ``_kinds``: a run's failure kind (the precedence is in that module's docstring).
- ``_signature``: which runs are one case, and the id a prompt gives.
- ``_case``: ``case_from_run``, one run frozen into a pending case (its harvested checks proposed by
  ``checks.HARVESTED``).
- ``_store``: ``harvest``, a whole store streamed into cases, folding runs of one signature.
- ``_clusters``: which failing runs are one failure (a masked signature), ``_triage``: a window of them
  ranked as clusters, ``_by_cluster``: one case per cluster no case covers.
- ``_refresh``: ``rerecord``, a stale case's recording taken from a newer run, the reviewer's fields kept.
"""

from ._by_cluster import ClusterHarvest, harvest_clusters
from ._case import COST_HEADROOM, case_from_run
from ._clusters import SIMILAR, ClusterKey, cluster_key, mask
from ._kinds import FAILURE_KINDS, LOOP_REPEATS, failure_kind
from ._refresh import Refreshed, matching_runs, refresh, rerecord, same_situation
from ._signature import normalize_prompt, signature, slug
from ._store import HarvestResult, harvest
from ._triage import Cluster, Triage, triage

__all__ = [
    "COST_HEADROOM",
    "SIMILAR",
    "Cluster",
    "ClusterHarvest",
    "ClusterKey",
    "Triage",
    "FAILURE_KINDS",
    "LOOP_REPEATS",
    "HarvestResult",
    "Refreshed",
    "case_from_run",
    "cluster_key",
    "failure_kind",
    "harvest",
    "harvest_clusters",
    "mask",
    "matching_runs",
    "normalize_prompt",
    "refresh",
    "rerecord",
    "same_situation",
    "signature",
    "slug",
    "triage",
]
