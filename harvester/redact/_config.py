"""The project's redaction, from ``[tool.harvester.redact]``."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ._traversal import Redactor

__all__ = ["redaction_for"]


def redaction_for(config: Any) -> Redactor | bool:
    """The project's redaction (``[tool.harvester.redact]``): built-in rules plus its own, or off.

    Built now, so a bad rule is a usage error naming the config file, not a failure mid-import.
    """
    rules = config.redact
    if not rules.enabled:
        return False
    try:
        return Redactor(rules.patterns, rules.fields)
    except ValueError as exc:
        raise ConfigError(str(exc), file=config.source, field="redact") from None
