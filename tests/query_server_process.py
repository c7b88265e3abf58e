"""A real ``manage.py sbert_query_server`` subprocess on the test database, for the tests of
the host's query server (``django_sbert.serving.query_server``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.worker_process import ROOT, test_database_url

READY = "Query server ready on"


class QueryServerProcess:
    """The server listening on ``socket``; ready when constructed. ``config`` is merged into
    its ``SBERT["QUERY_SERVER"]`` (``tests/query_server_settings.py`` reads it)."""

    def __init__(self, directory: Path, **config: Any) -> None:
        self.socket = str(directory / "query.sock")
        self.log_path = directory / "query-server.log"
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.query_server_settings",
            "DATABASE_URL": test_database_url(),
            "SBERT_TEST_QUERY_SERVER": json.dumps(config),
        }
        command = [
            sys.executable, "-m", "django", "sbert_query_server",
            "--socket", self.socket, "--threads", "1",
        ]  # fmt: skip
        self.log = self.log_path.open("ab")
        self.start = self.log_path.stat().st_size  # a server started before wrote above this
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=environment, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 180  # generous: another test process may share the CPU
        while READY not in self.output():
            if self.process.poll() is not None:
                raise RuntimeError(f"query server exited:\n{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"query server never got ready:\n{self.output()[-3000:]}")
            time.sleep(0.1)

    def output(self) -> str:
        with self.log_path.open("rb") as log:
            log.seek(self.start)
            return log.read().decode(errors="replace")

    def stats(self) -> dict[str, Any]:
        from django_sbert.serving.query_server import server_stats

        return server_stats(self.socket)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self.log.close()
