"""A tool a process pool runs (importable by a spawned child): it notes each real run in ./ran.log."""

import harvester


@harvester.tool(name="render_invoice")
def render(order_id: str) -> str:
    with open("ran.log", "a") as f:
        f.write(order_id + "\n")
    return f"invoice-{order_id}"
