"""Moved to ``harvester.intake``; this module keeps the old import path working for one release."""

import warnings

from .intake import HarvestingSpanProcessor, RunWriter, sampled_in  # noqa: F401

warnings.warn("harvester.capture moved to harvester.intake", DeprecationWarning, stacklevel=2)
