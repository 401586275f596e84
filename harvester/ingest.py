"""Moved to ``harvester.intake``; this module keeps the old import path working for one release."""

import warnings

from .intake import IngestStats, default_jobs, ingest_files  # noqa: F401

warnings.warn("harvester.ingest moved to harvester.intake", DeprecationWarning, stacklevel=2)
