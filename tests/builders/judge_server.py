"""An OpenAI-compatible chat server on 127.0.0.1 for a model judge configured by base URL: it answers
every chat completion with the judge's verdict (``passes(question)``), as a real server would over HTTP,
and keeps the questions it was asked."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def judge_server(
    passes: Callable[[str], bool], reasons: tuple[str, str] = ("same facts", "different facts")
) -> Iterator[tuple[str, list[str]]]:
    """Yields the server's base URL (``http://127.0.0.1:PORT/v1``) and the questions it got; its reason
    is ``reasons[0]`` when it passes an answer, ``reasons[1]`` when it fails one."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body: dict[str, Any] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            question = str(body["messages"][-1]["content"])
            asked.append(question)
            passed = passes(question)
            verdict = json.dumps({"passed": passed, "reason": reasons[0] if passed else reasons[1]})
            tool = body["tools"][0]["function"]["name"]
            call = {"id": "call_1", "type": "function", "function": {"name": tool, "arguments": verdict}}
            answer = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                    }
                ],
                "usage": {"prompt_tokens": 50, "completion_tokens": 8, "total_tokens": 58},
            }
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", asked
    finally:
        server.shutdown()
        server.server_close()
