"""A report whose every field the HTML page shows holds hostile markup: the escaping tests' input."""

from __future__ import annotations

from harvester.report import (
    Call,
    CaseResult,
    CheckResult,
    Divergence,
    Injected,
    NoFixtureCall,
    Report,
    args_text,
)

HOSTILE = [
    "</script><script>window.pwned=1</script>",
    "<!-- x --><img src=x onerror=alert(1)>",
    '"\' onmouseover=alert(2) x="',
    "&amp; \u2028 \u2029 </style><b>bold</b>",
]


def hostile_report() -> Report:
    """Hostile markup in the suite, id, tags, why, checks, calls, answers, notes and refusals."""
    h = HOSTILE
    return Report(
        suite=h[0],
        results=[
            CaseResult(
                id=h[1],
                passed=False,
                tags=[h[2], h[3]],
                why=h[0],
                answer=h[1],
                recorded_answer=h[0],
                error=h[2],
                checks=[CheckResult(name=h[3], passed=False, detail=h[1])],
                recorded_calls=[Call(tool=h[0], args=args_text({h[1]: h[2]}))],
                calls=[Call(tool=h[0], args=args_text({h[1]: h[3]})), Call(tool=h[2], args=h[3], status=h[1])],
                divergence=Divergence(step=2, recorded=None, actual=h[2]),
                no_fixture=1,
                no_fixture_calls=[NoFixtureCall(tool=h[3], reason=h[0], differs=[h[1]], args={h[0]: 1}, closest=h[2])],
                unused=1,
                unused_calls=[h[3]],
                notes=[h[0]],
                injected=Injected(tool=h[1], mode=h[2]),
            )
        ],
        refused=1,
        refused_calls=[h[1]],
    )
