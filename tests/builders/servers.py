"""Waiting for a real server a test started (Phoenix, MLflow) to answer its health check."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

import pytest


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, *, timeout: float) -> None:
    """Until ``url`` answers 200; a server that exits or takes longer fails the test with its log's tail."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_bytes()[-2000:].decode("utf-8", "replace")
            pytest.fail(f"{url} did not come up (exit {proc.poll()}):\n{tail}")
        time.sleep(0.2)
