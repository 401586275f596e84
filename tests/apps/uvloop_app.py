"""An app that runs on uvloop (``uvloop.install()`` at import, as its docs show for a server), whose async
refund tool posts to the payments service at ``LEAKY_URL`` with ``asyncio.open_connection``. uvloop's
loop connects in C, where no audit hook sees it: a sealed replay makes its loops the standard library's."""

from __future__ import annotations

import asyncio
import os
from typing import Any
from urllib.parse import urlsplit

import uvloop

uvloop.install()


async def issue_refund(order_id: str) -> str:
    where = urlsplit(os.environ["LEAKY_URL"])
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    writer.write(b"POST /refund HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
    await writer.drain()
    data = await reader.read(100)
    writer.close()
    return data.decode()


def build() -> Any:
    async def agent(prompt: str) -> str:
        loop = type(asyncio.get_running_loop()).__module__
        try:
            return f"Refund: {await issue_refund('A1001')} (on {loop})"
        except OSError as exc:
            return f"Refund failed: {exc} (on {loop})"

    return agent
