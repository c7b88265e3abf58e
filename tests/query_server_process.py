"""A real ``manage.py sbert_query_server`` subprocess on the test database, for the tests of
the host's query server (``django_sbert.serving.query_server``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.worker_process import ROOT, LoggedProcess, test_database_url

READY = "Query server ready on"


class QueryServerProcess(LoggedProcess):
    """The server listening on ``socket``; ready when constructed. ``flags`` are the
    command's (``max_queue=1``: ``--max-queue 1``)."""

    name = "query server"

    def __init__(self, directory: Path, **flags: Any) -> None:
        self.socket = str(directory / "query.sock")
        self.log_path = directory / "query-server.log"
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.query_server_settings",
            "DATABASE_URL": test_database_url(),
        }
        command = [
            sys.executable, "-m", "django", "sbert_query_server",
            "--socket", self.socket, "--threads", "1",
        ]  # fmt: skip
        for name, value in flags.items():
            command += [f"--{name.replace('_', '-')}", str(value)]
        self.log = self.log_path.open("ab")
        self.start = self.log_path.stat().st_size  # a server started before wrote above this
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=environment, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.wait_for(READY, timeout=180)  # generous: another test process may share the CPU

    def stats(self) -> dict[str, Any]:
        from django_sbert.serving.query_server import server_stats

        return server_stats(self.socket)
