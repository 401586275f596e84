"""Reports to judge: suites green, red or in between (``suite_report``), and one whose every field the HTML
page shows holds hostile markup (``hostile_report``, the escaping tests' input)."""

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


def suite_report(*passes: int, trials: int = 1, suite: str = "s") -> Report:
    """Cases ``c0``, ``c1``, ... that passed ``passes[i]`` of their ``trials`` trials: ``suite_report(0, 0, 0)``
    is a red suite, ``suite_report(3, 1, trials=3)`` one green and one flaky case."""
    return Report(
        suite=suite,
        suite_version="1.0.0",
        trials=trials,
        results=[CaseResult(id=f"c{i}", passed=p == trials, passes=p, trials=trials) for i, p in enumerate(passes)],
    )
