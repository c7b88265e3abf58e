"""A real Celery worker as a subprocess, for tests that need delivery through the broker.

``celery -A tests.celery_app worker -Q <queue> -P prefork -c 1`` (or the ``pool`` options a
test gives), reaching the test database
through ``DATABASE_URL`` (pytest-django's test database name). Each test module passes its
own queue name, so tests running at the same time on the same Redis never share tasks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def test_database_url() -> str:
    """``DATABASE_URL`` of this session with the path replaced by pytest-django's test database."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))


test_database_url.__test__ = False  # a helper, not a test


class LoggedProcess:
    """A subprocess whose output goes to ``log_path``, read from byte ``start`` on (a process
    started before in the same file wrote above it)."""

    name = "process"
    process: subprocess.Popen
    log_path: Path
    log: Any
    start = 0

    def output(self) -> str:
        with self.log_path.open("rb") as log:
            log.seek(self.start)
            return log.read().decode(errors="replace")

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} never logged {text!r}:\n{self.output()[-3000:]}")
            time.sleep(0.1)

    def kill_all(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill_all()
        self.log.close()


class Worker(LoggedProcess):
    """One worker subprocess on ``queue``, logging to ``log_path``; ready when constructed.

    ``settings_module`` and ``env`` reach the worker's environment (a settings module made
    for a test, and the values it reads); ``pool`` replaces ``-P prefork -c 1``.
    """

    def __init__(
        self,
        log_path: Path,
        queue: str,
        *,
        settings_module: str = "tests.settings",
        env: dict[str, str] | None = None,
        pool: Sequence[str] = ("-P", "prefork", "-c", "1"),
    ) -> None:
        self.log_path = log_path
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": settings_module,
            "DATABASE_URL": test_database_url(),
            **(env or {}),
        }
        command = [
            sys.executable, "-m", "celery", "-A", "tests.celery_app", "worker",
            "-Q", queue, *pool, "-l", "INFO",
            "-n", f"{queue}-{uuid.uuid4().hex[:4]}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        self.log = log_path.open("ab")
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=environment, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.wait_for("ready.", timeout=180)  # generous: another test process may share the CPU

    name = "worker"

    def child_pids(self) -> list[int]:
        return [p.pid for p in psutil.Process(self.process.pid).children(recursive=True)]

    def kill_all(self) -> None:
        """SIGKILL the main process and its pool children: nothing gets to clean up."""
        for pid in [*self.child_pids(), self.process.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=30)
