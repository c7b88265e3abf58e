"""Run the example project's ``demo.py`` as ``make demo`` does, in a temporary folder.

The demo starts its own embedded PostgreSQL, a Celery worker on the filesystem broker and
``runserver``; the variables this test session set for its own database and broker are
removed so the demo picks its own defaults, exactly as on a newcomer's machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "example_project" / "demo.py"
ARTIFACTS = ROOT / "artifacts"
DEMO_ARTICLES = 60  # the real model encodes these in well under a minute on 2 cores


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class DemoProcess:
    """``python example_project/demo.py`` with its output collected as it comes."""

    def __init__(
        self,
        var_dir: Path,
        port: int,
        articles: int = DEMO_ARTICLES,
        env: dict[str, str] | None = None,
    ) -> None:
        self.var_dir = var_dir
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        extra = dict(env or {})
        env = {
            k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}
        }
        env.update(HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", **extra)
        command = [sys.executable, str(DEMO), "--port", str(port), "--articles", str(articles)]
        command += ["--var-dir", str(var_dir)]
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a Ctrl-C in the terminal reaches it only through us
        )
        self._chunks: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._chunks.append(line)

    @property
    def output(self) -> str:
        return "".join(self._chunks)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """Wait until the output matches ``pattern``; fail with the output if it does not."""
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, self.output)
            if match:
                return match
            if self.process.poll() is not None:
                self._reader.join(timeout=5)
                pytest.fail(
                    f"demo.py exited ({self.process.returncode}):\n{self.output}\n{self.logs()}"
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"demo.py never printed {pattern!r} in {timeout:.0f} s:\n"
                    f"{self.output}\n{self.logs()}"
                )
            time.sleep(0.2)

    def logs(self) -> str:
        parts = []
        for name in ("worker.log", "training.log", "web.log"):
            path = self.var_dir / "logs" / name
            if path.exists():
                parts.append(f"--- {name} (end) ---\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)

    def postmaster_pid(self) -> int | None:
        pid_file = self.var_dir / "pgdata" / "postmaster.pid"
        if not pid_file.exists():
            return None
        return int(pid_file.read_text().splitlines()[0])

    def interrupt(self, timeout: float = 60.0) -> int:
        """Ctrl-C: SIGINT to demo.py alone, as the terminal would; its exit status."""
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self._reader.join(timeout=5)

    def kill(self) -> None:
        """Last resort after a failed test: nothing of the demo may outlive the session."""
        pids = [p.pid for p in self.descendants()] if self.process.poll() is None else []
        pg = self.postmaster_pid()
        for pid in [self.process.pid, *pids]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        if pg is not None and psutil.pid_exists(pg):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pg, signal.SIGQUIT)  # PostgreSQL's immediate shutdown


BROWSER_HINT = (
    "The browser tests need Debian's Chromium and its driver: "
    "`sudo apt-get install chromium chromium-driver` (`make test` runs `make browser`, which "
    "installs them when run as root)."
)


def chromium_paths() -> tuple[str, str]:
    """Where ``chromium`` and ``chromedriver`` are; skips the test, saying how to install them,
    when either is missing (a machine without a browser still runs the rest of the suite). Call
    it before starting a demo, not after its minutes of set-up."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip(f"chromium or chromedriver not found on PATH. {BROWSER_HINT}")
    return chromium, driver


@pytest.fixture(scope="module")
def demo_var_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("demo") / "var"


@pytest.fixture(scope="module")
def start_demo(demo_var_dir: Path) -> Iterator:
    """Start demo.py (module scope: the runs of one test module share one data folder)."""
    runs: list[DemoProcess] = []

    def start(env: dict[str, str] | None = None) -> DemoProcess:
        runs.append(DemoProcess(demo_var_dir, free_port(), env=env))
        return runs[-1]

    yield start
    for run in runs:
        if run.process.poll() is None:
            run.kill()
