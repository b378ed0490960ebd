"""A throwaway PostgreSQL cluster for tests, from Debian's binaries (no docker, no network).

`PostgresCluster.start()` runs ``initdb`` into a fresh temporary directory as an
unprivileged user (the ``postgres`` system user Debian's package creates when we
run as root, ourselves otherwise), starts it with ``pg_ctl`` listening on
127.0.0.1 only, on a free port, with its socket in that directory, and
`stop()` removes the whole directory. Durability settings are off (``fsync``,
``synchronous_commit``) unless `durable`: the server is never killed in tests,
only clients are.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from attrs import define, field

__all__ = ["PostgresCluster", "PostgresUnavailable", "find_postgres_bin", "throwaway_cluster"]

#: the account tests connect as; trust authentication on 127.0.0.1 of a throwaway cluster
SUPERUSER = "backchannel"


class PostgresUnavailable(RuntimeError):
    """PostgreSQL's server binaries are not installed here (the reason says what to do)."""


def find_postgres_bin() -> Path:
    """Return the newest /usr/lib/postgresql/<major>/bin that has initdb and pg_ctl."""
    explicit = os.environ.get("BACKCHANNEL_PG_BIN")
    candidates = [explicit] if explicit else []
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda path: int(Path(path).parent.name) if Path(path).parent.name.isdigit() else 0,
        reverse=True,
    )
    for candidate in candidates:
        directory = Path(candidate)
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    raise PostgresUnavailable(
        "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin"
        " (install Debian's `postgresql` package, or run `make test`, which does;"
        " or set BACKCHANNEL_PG_BIN to a directory holding initdb and pg_ctl)"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@define
class PostgresCluster:
    """One running throwaway cluster; `url(database)` builds a connection URL to it."""

    bin_dir: Path
    directory: Path
    port: int = 0
    run_as: str | None = None
    #: keep PostgreSQL's crash-safe defaults (fsync, synchronous_commit) for benchmarks
    durable: bool = False
    _next_database: int = field(default=0, init=False)

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        kwargs: dict[str, object] = {}
        if self.run_as is not None:
            kwargs = {"user": self.run_as, "group": self.run_as, "extra_groups": []}
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"},
            **kwargs,  # type: ignore[call-overload]
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{args[0]} failed with exit status {result.returncode}:"
                f" {(result.stderr or result.stdout).strip()[-2000:]}"
            )
        return result

    def start(self) -> None:
        self._run(
            "initdb",
            "--pgdata",
            str(self.data_dir),
            "--username",
            SUPERUSER,
            "--auth",
            "trust",
            "--encoding",
            "UTF8",
            "--no-sync",
        )
        fast = ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.directory}",
                *([] if self.durable else fast),
                "-c max_connections=200",
                "-c shared_buffers=64MB",
            ]
        )
        for attempt in range(5):
            try:
                self._run(
                    "pg_ctl",
                    "start",
                    "--wait",
                    "--timeout",
                    "60",
                    "--pgdata",
                    str(self.data_dir),
                    "--log",
                    str(self.directory / "server.log"),
                    "--options",
                    options,
                )
                return
            except RuntimeError:
                if attempt == 4:
                    raise RuntimeError(
                        f"the throwaway PostgreSQL did not start; its log:\n{self.log_tail()}"
                    ) from None
                self.port = free_port()  # someone took the port meanwhile
                options = options.replace(options.split()[1], str(self.port), 1)

    def log_tail(self) -> str:
        try:
            return (self.directory / "server.log").read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if (self.data_dir / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "stop", "--pgdata", str(self.data_dir), "--mode", "immediate")
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.directory, ignore_errors=True)

    def fresh_database(self, prefix: str = "t") -> str:
        """Create an empty database and return its URL (psycopg is imported here, lazily)."""
        import psycopg

        self._next_database += 1
        name = f"{prefix}_{os.getpid()}_{self._next_database}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)


def _unprivileged_user() -> str | None:
    """Return the user to run the server as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresUnavailable(
            "running as root and there is no `postgres` system user to run a test cluster as"
            " (Debian's `postgresql` package creates it: apt-get install postgresql)"
        ) from None
    return "postgres"


@contextmanager
def throwaway_cluster(*, durable: bool = False) -> Iterator[PostgresCluster]:
    """Start a cluster in a new temporary directory; stop it and remove the directory after.

    Tests run it with fsync and synchronous_commit off; `durable` keeps them on.
    """
    bin_dir = find_postgres_bin()
    run_as = _unprivileged_user()
    directory = Path(tempfile.mkdtemp(prefix="backchannel-pg-"))
    directory.chmod(0o700)
    if run_as is not None:
        user = pwd.getpwnam(run_as)
        os.chown(directory, user.pw_uid, user.pw_gid)
    cluster = PostgresCluster(bin_dir, directory, free_port(), run_as, durable)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
