"""The verdict cache: a judge's verdict on an answer, kept so a re-run of an unchanged answer costs nothing.

Keyed by ``BuiltJudge.key`` (the judge's config and rubric, the prompt, the answer, the expected answer),
one JSON line per verdict in ``.harvester/verdicts.jsonl`` beside the project's config: appending is
safe from the replay's many threads under one lock, a crash loses at most the line being written, and a
line that does not read (a cut write, an edit) is skipped, never an error: the cache is disposable.
Only verdicts are kept; a judge that raised or timed out is asked again next time.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson

from ._judge import Verdict

__all__ = ["CACHE_FILE", "VerdictCache", "judging_dir"]

CACHE_FILE = "verdicts.jsonl"


def judging_dir(config: Any) -> Path:
    """``.harvester/`` beside the config file that set up the judges (the cwd's without one)."""
    source = getattr(config, "source", None)
    return (Path(source).parent if source else Path.cwd()) / ".harvester"


class VerdictCache:
    """Verdicts by key; ``path`` None keeps them in memory only (a library call that wants no file)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._verdicts: dict[str, Verdict] = {}
        if self.path is not None and self.path.is_file():
            for line in self.path.read_bytes().splitlines():
                self._read(line)

    def _read(self, line: bytes) -> None:
        try:
            data = orjson.loads(line)
            self._verdicts[str(data["key"])] = Verdict(
                bool(data["passed"]),
                str(data["reason"]),
                int(data.get("input_tokens", 0)),
                int(data.get("output_tokens", 0)),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return

    def __len__(self) -> int:
        return len(self._verdicts)

    def get(self, key: str) -> Verdict | None:
        with self._lock:
            return self._verdicts.get(key)

    def put(self, key: str, verdict: Verdict) -> None:
        line = orjson.dumps(
            {
                "key": key,
                "passed": verdict.passed,
                "reason": verdict.reason,
                "input_tokens": verdict.input_tokens,
                "output_tokens": verdict.output_tokens,
            }
        )
        with self._lock:
            self._verdicts[key] = verdict
            if self.path is None:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as f:
                f.write(line + b"\n")
