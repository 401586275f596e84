"""An own-loop support agent whose model call is served as every framework's model guard serves one: it
asks ``seam.model_server()`` first and calls its model only when nothing answered. Its model is a
provider on 127.0.0.1 (``RM_MODEL_URL``, a loopback server the test runs), reached over HTTP, so the seal
sees it as it would see any provider.

What the candidate changed, for drift: ``RM_SYSTEM`` (the system prompt), ``RM_TOOL`` (``add:<name>``
offers one more tool, ``schema`` renames kb_search's parameter), ``RM_PROMPT_PREFIX`` (prepended to the
user's message), ``RM_TEMPERATURE``, ``RM_EXTRA_CALL`` (asks the model once more after the answer).
``RM_UNGUARDED=1``: the loop never asks the server (a model call harvester cannot serve).
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from harvester import seam

SYSTEM = "You are a support agent.\nLook up the policy before answering.\nNever refund without approval."
URL_ENV = "RM_MODEL_URL"


def tool_specs() -> list[dict[str, Any]]:
    query = "q" if os.environ.get("RM_TOOL") == "schema" else "query"
    specs = [
        {
            "name": "kb_search",
            "description": "Search the knowledge base.",
            "parameters": {"type": "object", "properties": {query: {"type": "string"}}, "required": [query]},
        }
    ]
    extra = os.environ.get("RM_TOOL", "")
    if extra.startswith("add:"):
        specs.append({"name": extra[4:], "description": "Added.", "parameters": {"type": "object"}})
    return specs


def request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The request this loop sends, normalized as a guard hands it to the server."""
    return {
        "system": os.environ.get("RM_SYSTEM", SYSTEM),
        "messages": [dict(m) for m in messages],
        "tools": tool_specs(),
        "settings": {"temperature": float(os.environ.get("RM_TEMPERATURE", "0"))},
    }


def _model(req: dict[str, Any]) -> dict[str, Any]:
    server = None if os.environ.get("RM_UNGUARDED") == "1" else seam.model_server()
    if server is not None:
        answer = server.answer(req)  # type: ignore[arg-type]
        if answer is not None:
            return dict(answer)
    return httpx.post(os.environ[URL_ENV], json=req, timeout=5).json()  # type: ignore[no-any-return]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "tool_calls": [], "tool_call_id": None}


def build(tools: Any) -> Any:
    def agent(prompt: str) -> str:
        messages = [user(os.environ.get("RM_PROMPT_PREFIX", "") + prompt)]
        for _ in range(5):
            answer = _model(request(messages))
            if not answer.get("tool_calls"):
                if os.environ.get("RM_EXTRA_CALL") == "1":
                    _model(request([*messages, {**user("anything else?"), "role": "user"}]))
                return str(answer.get("text"))
            calls = answer["tool_calls"]
            messages.append({"role": "assistant", "content": None, "tool_calls": calls, "tool_call_id": None})
            for i, call in enumerate(calls):
                result = tools.execute(call["name"], call["args"])
                messages.append(
                    {
                        "role": "tool",
                        "content": str(result),
                        "tool_calls": [],
                        "tool_call_id": call.get("call_id") or f"call_{i}",
                    }
                )
        return "gave up"

    return agent
