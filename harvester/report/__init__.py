"""Reports: what a replay saw, per case and in aggregate, saved as JSON so a baseline lives in the repo.

``regressed_against`` is the question a release gate asks: which cases passed before and fail now.
A new pass is an improvement, never a regression. With trials a single flaky failure must not block a
release, so a drop only counts when a one-sided Fisher exact test says it is unlikely to be noise;
smaller drops are listed as "changed, not significant" so nobody loses sight of them.

One module per concept: ``_results`` (one case), ``_metrics`` (figures and the statistics),
``_compare`` (against a baseline), ``_judging`` (what the judges did and cost), ``_report`` (the report
and its file), ``_render`` (terminal, JUnit, Markdown), ``_html`` (the HTML page), ``_merge`` (shards),
``_gates`` (release gates).
"""

from .._files import check_output, write_file
from ._compare import ALPHA, Comparison, compare, failed_too_text
from ._gates import (
    DEFAULT_GATES,
    EXIT_INCONCLUSIVE,
    INCONCLUSIVE_POLICIES,
    MIN_TASK_COMPLETION,
    Gate,
    GateOutcome,
    GateResult,
    evaluate_gates,
    parse_gate,
)
from ._html import attr as html_attr
from ._html import case_verdict
from ._html import e as html_text
from ._html import html as render_html
from ._html import page as html_page
from ._html import table as html_table
from ._html_assets import CSS as HTML_CSS
from ._inert import visible
from ._judging import Judging, calibration_html
from ._merge import check_shards, merge
from ._metrics import METRICS, RATES, by_tag, fisher_drop_p, is_rate, metrics_of
from ._otel import EmitResult, ExporterMissing, emit_verdicts, exporter_available, resolve_endpoint
from ._report import SCHEMA, Report, redacted
from ._results import (
    ANSWER_CHARS,
    MAX_CALLS,
    MAX_NO_FIXTURE_CALLS,
    Call,
    CaseResult,
    CheckResult,
    Divergence,
    Injected,
    ModelDrift,
    ModelServed,
    NoFixtureCall,
    SandboxCall,
    args_text,
)

__all__ = [
    "HTML_CSS",
    "html_attr",
    "html_text",
    "visible",
    "redacted",
    "ANSWER_CHARS",
    "EmitResult",
    "ExporterMissing",
    "MAX_CALLS",
    "emit_verdicts",
    "exporter_available",
    "resolve_endpoint",
    "ALPHA",
    "Call",
    "CaseResult",
    "CheckResult",
    "Comparison",
    "DEFAULT_GATES",
    "EXIT_INCONCLUSIVE",
    "INCONCLUSIVE_POLICIES",
    "Divergence",
    "Gate",
    "GateOutcome",
    "GateResult",
    "Injected",
    "Judging",
    "MAX_NO_FIXTURE_CALLS",
    "MIN_TASK_COMPLETION",
    "METRICS",
    "ModelDrift",
    "ModelServed",
    "NoFixtureCall",
    "SandboxCall",
    "RATES",
    "Report",
    "SCHEMA",
    "args_text",
    "by_tag",
    "calibration_html",
    "case_verdict",
    "html_page",
    "html_table",
    "check_output",
    "check_shards",
    "compare",
    "evaluate_gates",
    "failed_too_text",
    "fisher_drop_p",
    "is_rate",
    "merge",
    "metrics_of",
    "parse_gate",
    "render_html",
    "write_file",
]
