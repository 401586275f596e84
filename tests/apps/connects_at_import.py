"""An app that connects to its payments service when it is imported (as a module-level database, cache or
metrics client does), then sends on that connection from its tool: ``harvester replay --agent`` must
import it sealed, or what the tool sends later is never checked."""

from __future__ import annotations

import os
import socket
from typing import Any
from urllib.parse import urlsplit

_where = urlsplit(os.environ["LEAKY_URL"])
_client = socket.create_connection((_where.hostname or "", _where.port or 80), timeout=5)


def build() -> Any:
    def agent(prompt: str) -> str:
        _client.sendall(b"POST /refund HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
        return "Refund: sent"

    return agent
