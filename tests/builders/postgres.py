"""A throwaway PostgreSQL server for the store tests: Debian's binaries, a cluster in a temporary folder.

``postgres_server`` (once per session) runs ``initdb`` and ``pg_ctl start`` as an unprivileged user when
the tests run as root (CI does; PostgreSQL refuses root), listening on 127.0.0.1 only, trust auth, on a
free port, and stops it at the end. ``postgres_url`` gives each test a database of its own; ``store_url``
runs a test once on each engine. Without the
binaries the tests skip, unless ``HARVESTER_REQUIRE_POSTGRES=1`` (``.ci/run``), which makes that a failure.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

__all__ = [
    "ClusterError",
    "Server",
    "cluster",
    "create_database",
    "pg_bin",
    "postgres_server",
    "postgres_url",
    "store_url",
]

_databases = itertools.count()


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (``/usr/lib/postgresql/<version>/bin``), if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, port: int, admin: str, pg_ctl: Callable[..., None] | None = None) -> None:
        self.port = port
        self.admin = admin  # a URL to the maintenance database, for CREATE DATABASE
        self._pg_ctl = pg_ctl

    def stop(self) -> None:
        """Stop the server (fast: its clients' connections are cut), as a restart or a crash does."""
        assert self._pg_ctl is not None
        self._pg_ctl("stop", "-m", "fast")

    def start(self) -> None:
        """Start it again, on the same port, returning once it accepts connections."""
        assert self._pg_ctl is not None
        self._pg_ctl("start")

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


class ClusterError(Exception):
    """initdb or pg_ctl failed: the message has its output and the server log's tail."""


@contextlib.contextmanager
def cluster(bin_dir: Path, *, durable: bool = False) -> Iterator[Server]:
    """A throwaway cluster on 127.0.0.1 (as ``nobody`` when run as root: PostgreSQL refuses root), stopped
    and deleted at the end. Not ``durable``: fsync and synchronous commit off, as tests want; the
    benchmarks run it with PostgreSQL's defaults."""
    as_root = os.geteuid() == 0
    # Under /tmp as root: nobody may not get through the folders leading to $TMPDIR.
    root = Path(tempfile.mkdtemp(prefix="harvester-pg-", dir="/tmp" if as_root else None))
    user = None
    if as_root:  # the server refuses to run as root: as nobody, in a folder nobody owns
        user = "nobody"
        who = pwd.getpwnam(user)
        os.chown(root, who.pw_uid, who.pw_gid)
    data, log, port = root / "data", root / "server.log", _free_port()

    def run(*args: str) -> None:
        done = subprocess.run(
            [str(bin_dir / args[0]), *args[1:]], user=user, capture_output=True, text=True, cwd=root, timeout=120
        )
        if done.returncode:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise ClusterError(f"{args[0]} failed ({done.returncode}): {done.stderr[-2000:]}\n{tail}")

    try:
        run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} -c max_connections=200"
        )
        if not durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"

        def pg_ctl(action: str, *args: str) -> None:
            run("pg_ctl", "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", *args, action)

        pg_ctl("start")
        yield Server(port, f"postgresql://postgres@127.0.0.1:{port}/postgres", pg_ctl)
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                user=user,
                capture_output=True,
                cwd=root,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)


def create_database(server: Server, name: str) -> str:
    import psycopg

    with psycopg.connect(server.admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.url(name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Server]:
    bin_dir = pg_bin()
    if bin_dir is None:
        message = "no PostgreSQL binaries in /usr/lib/postgresql/*/bin (apt-get install postgresql)"
        if os.environ.get("HARVESTER_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    pytest.importorskip("psycopg")
    try:
        with cluster(bin_dir) as server:
            yield server
    except ClusterError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def postgres_url(postgres_server: Server) -> Iterator[str]:
    """A fresh, empty database on the session's server, dropped after the test."""
    import psycopg

    name = f"t{os.getpid()}_{next(_databases)}"
    yield create_database(postgres_server, name)
    with psycopg.connect(postgres_server.admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store of each engine: a SQLite file, and a fresh database on the session's PostgreSQL server."""
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return str(tmp_path / "t.db")
