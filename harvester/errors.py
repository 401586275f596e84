"""Every exception harvester raises on purpose, in one place.

    HarvesterError                 base; the CLI turns any of these into one line and exit 2
    ├── InputError                 a file, spec or argument a user gave us is wrong
    │   ├── RunFormatError         a Run JSON that does not validate
    │   ├── OtlpFormatError        an OTLP/JSON document we cannot read
    │   ├── CaseFileError          a case file or suite manifest that does not validate
    │   ├── ConfigError            harvester.toml / [tool.harvester] problems
    │   ├── ReportFormatError      a report file that is not a harvester report
    │   ├── CheckSpecError         a declarative check with an unknown name or bad arguments
    │   └── GateError              a gate expression we cannot parse
    ├── NotFoundError              a trace or case id that is not stored
    ├── StoreError                 the trace store cannot be opened or written
    ├── ReceiverError              ``harvester serve`` cannot listen, or lacks opentelemetry-proto
    ├── BackendError               an observability backend (Phoenix, MLflow, Jaeger, Tempo) cannot be
    │                              reached, refuses us, or answers in a form we cannot read
    ├── AgentLoadError             ``--agent module:attr`` cannot be imported or called
    │   └── AgentBuildError        the agent factory raised (or was called wrongly) for EVERY case:
    │                              a harness error, not N case failures
    ├── OutputError                a report file cannot be written (a directory, a missing or read-only
    │                              folder); carries ``file``
    ├── NoFixture                  replay met a tool call with no recorded fixture (opt-in raise)
    ├── LiveToolCall               a replay refused a tool call that would have run for real
    ├── ModelInputChanged          a recorded-model replay met a request unlike the recorded one at
    │                              its step: the recording no longer answers it
    └── Sealed                     a replay's seal refused a connection or a process the case did not
                                   expect (also a ``PermissionError``: an ``OSError`` to client libraries)

Each error that comes from a file carries ``file`` and ``field`` so the message can name both.

Not ``HarvesterError``s, because they stand in for someone else's failure:

    ToolFailure                    a recorded or injected tool failure, raised into the agent where
                                   the live tool raised (also an instance of the recorded type)
    ReplayTimeout                  the replay gave up on an agent (a ``TimeoutError``)
    BadRequest                     ``harvester serve`` answers a request with an error status
    ClientGone                     ``harvester serve``'s client left before its request was read
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from typing import Any

__all__ = [
    "AgentBuildError",
    "AgentLoadError",
    "BackendError",
    "BadRequest",
    "CaseFileError",
    "CheckSpecError",
    "ClientGone",
    "ConfigError",
    "GateError",
    "HarvesterError",
    "InputError",
    "LiveToolCall",
    "ModelInputChanged",
    "NoFixture",
    "NotFoundError",
    "OtlpFormatError",
    "OutputError",
    "ReceiverError",
    "ReplayTimeout",
    "ReportFormatError",
    "RunFormatError",
    "Sealed",
    "StoreError",
    "ToolFailure",
    "pydantic_field",
]


class HarvesterError(Exception):
    """Base class: an expected failure with a message fit for a user."""


class InputError(HarvesterError):
    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.message = message
        self.file = file
        self.field = field
        where = ": ".join(p for p in (file, field) if p)
        super().__init__(f"{where}: {message}" if where else message)


class RunFormatError(InputError):
    pass


class OtlpFormatError(InputError):
    pass


class CaseFileError(InputError):
    pass


class ConfigError(InputError):
    pass


class ReportFormatError(InputError):
    pass


class CheckSpecError(InputError):
    pass


class GateError(InputError):
    pass


class NotFoundError(HarvesterError):
    pass


class StoreError(HarvesterError):
    pass


class ReceiverError(HarvesterError):
    pass


class BackendError(HarvesterError):
    """``status``: the HTTP status the backend answered (0 when it was not reached at all)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class AgentLoadError(HarvesterError):
    pass


class AgentBuildError(AgentLoadError):
    """``factory()`` failed for every case and trial; ``error`` is the first failure, ``<Type>: <message>``."""

    def __init__(self, factory: str, error: str) -> None:
        self.factory = factory
        self.error = error
        super().__init__(f"the agent factory {factory} failed: {error}")


class OutputError(HarvesterError):
    """A file we were asked to write cannot be written; ``file`` is the path as the user gave it."""

    def __init__(self, message: str, *, file: str) -> None:
        self.file = file
        super().__init__(f"{file}: {message}")


class NoFixture(HarvesterError):
    """Raised instead of returning the ``no_fixture`` result when a case asks for it."""

    def __init__(self, result: Mapping[str, Any]) -> None:
        self.result = result  # the ``no_fixture`` result (``harvester.fixtures.NoFixtureResult``)
        super().__init__(f"{result.get('message', 'no fixture')} {result.get('hint', '')}".strip())


class LiveToolCall(HarvesterError, RuntimeError):
    """Raised into the agent in place of a tool call a replay cannot serve and must not run.

    A ``RuntimeError`` too, so an agent's generic error handling treats it as a failed tool call.
    """

    def __init__(self, tool: str, why: str) -> None:
        self.tool = tool
        self.why = why
        super().__init__(f"live_tool_call: {tool} {why}")


class ModelInputChanged(HarvesterError, RuntimeError):
    """Raised into the agent where a recorded-model replay cannot answer: the agent's request for step
    ``step`` (0-based) differs from the recorded one, by ``changes`` (lines a reader can act on).

    A ``RuntimeError`` too, so the agent's run fails as a failed model call would, and the case fails
    with ``model_input_changed at step N`` naming the changes.
    """

    def __init__(self, step: int, changes: list[str]) -> None:
        self.step = step
        self.changes = changes
        super().__init__(f"model_input_changed at step {step + 1}: " + "; ".join(changes[:3]))


class Sealed(HarvesterError, PermissionError):
    """Raised inside the agent where a replay's seal refuses a connection or a process start.

    A ``PermissionError`` (an ``OSError``), so every client library reports it as the failed connection
    or the failed ``Popen`` it is, and the agent's own error handling runs as it would offline.
    """

    def __init__(self, message: str) -> None:
        super().__init__(errno.EACCES, message)

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self) -> tuple[type[Sealed], tuple[str]]:
        """Made again from its message: a refusal in a process pool's worker goes back to the caller
        pickled (``OSError``'s own would call ``Sealed(errno, message)``, killing the pool's result thread)."""
        return Sealed, (str(self.strerror),)


class ToolFailure(Exception):
    """A recorded or injected tool failure, raised where the live tool would have raised.

    Its text is the recorded message, as the live exception's was (the type is ``type``): an agent that
    writes ``f"error: {exc}"`` into its next model request writes what production wrote.
    """

    def __init__(self, type: str, message: str = "") -> None:
        self.type = type
        self.message = message
        super().__init__(message or type)


class ReplayTimeout(TimeoutError):
    """The harness gave up on an agent; a ``TimeoutError`` the agent raised itself is reported as its own."""


class BadRequest(Exception):
    """A request the receiver answers with an error status; ``message`` goes back to the client."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


class ClientGone(Exception):
    """The client closed the connection before its request was read whole: nothing to answer."""


def pydantic_field(err: Any) -> tuple[str, str]:
    """(dotted field, message) of the first error of a pydantic ``ValidationError``."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ())) or "(root)"
    return loc, first.get("msg", "invalid")
