"""An app's own loop whose tool takes an e-mail address (``send_email(to=...)``), traced with
``harvester.agent_run`` and ``@harvester.tool``: capture redacts the address in the fixture
(``<email:...>``), and the agent sends it in the clear again in replay."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider

import harvester

PROMPT = "Email the receipt for order A1001 to bob@example.com"
SENT: list[str] = []  # every real run of the tool body


@harvester.tool
def send_email(to: str, subject: str) -> str:
    """Send an e-mail."""
    SENT.append(to)
    return f"queued for {to}"


def build(provider: TracerProvider | None = None):
    def agent(prompt: str) -> str:
        with harvester.agent_run("mailer", prompt, model="scripted", tracer_provider=provider) as run:
            args = {"to": "bob@example.com", "subject": "Receipt for A1001"}
            run.model_call("scripted", tool_calls=[{"id": "c1", "name": "send_email", "arguments": args}])
            send_email(**args)
            run.model_call("scripted", text="Sent.")
            run.finish("Sent.")
            return run.answer or ""

    return agent
