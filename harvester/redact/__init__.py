"""Redaction: secrets and personal data never reach the trace store.

Three floors, each its own module: the rule catalogue (``_rules``: what a secret looks like), the
text and JSON engine (``_engine``: finds matches and writes pseudonyms, knowing no harvester type),
and the traversal of runs and raw spans with its fast path and field rules (``_traversal``).
"""

from ._config import redaction_for
from ._rules import PLACEHOLDER, luhn_ok
from ._traversal import Redactor

__all__ = ["PLACEHOLDER", "Redactor", "luhn_ok", "redaction_for"]
