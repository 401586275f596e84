"""What a sealed replay's cases may reach: the suite's policy (the config's hosts and commands), each
case's model hosts, and whether the agent's model client may choose its endpoint (docs/seal.md, "What
a case may reach").

A case may reach the model hosts its recording holds (``recorded.model_hosts``), or every provider's
documented host when it holds none; none at all on the recorded model, which answers every model
call. Where every host it holds is a provider's documented one, the recording cannot say where the
agent's model is (OpenInference names a model call's provider, never its URL): on a live model the
client's model requests may then reach the endpoint the client is set to (``seam.model_call``), a
gateway or a local server. A recording that named another endpoint (a span's ``server.address``) is
held to it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config import ModelMode
from ..conventions import EVERY_PROVIDER_HOST
from ._policy import Policy, parse_host
from ._seal import model_endpoint

__all__ = ["Reach", "model_hosts", "plan_hosts"]


def model_hosts(recorded: Sequence[str]) -> Sequence[str]:
    """The model hosts a case's agent may reach: its recording's (``recorded.model_hosts``), or (a case
    recorded before harvester kept them, or whose spans named no model) every provider's documented host.
    One named without a port is reached at HTTP's or HTTPS's, never any port: a span leaves the
    scheme's default port out (pydantic-ai's ``server.address`` for ``http://localhost/v1``), and a
    documented host is an HTTPS URL's."""
    return [at for host in (recorded or EVERY_PROVIDER_HOST) for at in _web_ports(host)]


def _web_ports(host: str) -> tuple[str, ...]:
    if host.startswith("unix:") or parse_host(host).port is not None:
        return (host,)
    shown = f"[{host}]" if ":" in host else host
    return (f"{shown}:80", f"{shown}:443")


class Reach:
    """The policies of one replay's cases, built from the suite's, once per distinct recording's hosts."""

    __slots__ = ("_policies", "model", "policy")

    def __init__(self, policy: Policy, model: ModelMode) -> None:
        self.policy = policy
        self.model = model
        self._policies: dict[tuple[str, ...], Policy] = {}

    def hosts(self, recorded: Sequence[str]) -> Sequence[str]:
        """The model hosts a case whose recording holds ``recorded`` may reach: none when the recording
        answers every model call."""
        return () if self.model == "recorded" else model_hosts(recorded)

    def client_endpoints(self, recorded: Sequence[str]) -> bool:
        """Whether the agent's model client may reach the endpoint it is set to: on a live model (or once
        ``recorded-then-live`` goes live), when every host ``recorded`` holds is a documented one (at
        HTTPS's port, where a span said the port)."""
        return self.model != "recorded" and all(host.removesuffix(":443") in EVERY_PROVIDER_HOST for host in recorded)

    def case(self, recorded: Sequence[str]) -> Policy:
        """The policy of a case whose recording holds ``recorded``."""
        key = tuple(recorded)
        policy = self._policies.get(key)
        if policy is None:
            endpoint = model_endpoint if self.client_endpoints(key) else None
            policy = self._policies[key] = self.policy.with_hosts(self.hosts(key), model_endpoint=endpoint)
        return policy

    def suite(self, recorded: Sequence[Sequence[str]]) -> Policy:
        """What code that lost its case's context, and a process the agent starts, may reach: what any
        case of the plan may (``recorded``: each case's model hosts). Read once per distinct recording:
        a suite of many cases holds few (parsing each case's thirty documented hosts cost 5% of a replay)."""
        distinct = list(dict.fromkeys(tuple(each) for each in recorded))
        hosts = list(dict.fromkeys(host for each in distinct for host in self.hosts(each)))
        choose = any(self.client_endpoints(each) for each in distinct)
        return self.policy.with_hosts(hosts, model_endpoint=model_endpoint if choose else None)


def plan_hosts(hosts: Sequence[str], model: ModelMode, recorded: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """What code without a case's context may reach in a replay on ``model`` whose cases recorded
    ``recorded`` (each case's model hosts), ``hosts`` allowed too: what ``harvester replay`` imports the
    agent with, so a pool the import starts reaches the cases' model hosts as the suite's seal lets."""
    return Reach(Policy(hosts), model).suite(recorded).hosts
