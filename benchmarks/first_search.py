"""First search after each documented server says it is ready, with a cold and a warm compile
cache.

    python -m benchmarks.first_search [--servers gunicorn,uvicorn,demo] [--json PATH]

Each server starts as a subprocess on an embedded PostgreSQL, with all-MiniLM-L6-v2 on the
path this host takes (compiled where a C++ compiler is found) and a compile cache
(``SBERT["COMPILE_CACHE"]``) that is empty for the first start (a new host; Inductor's cache
emptied too) and filled by it for the second. The clock runs from the spawn to the line the
server prints when it is ready, then times the first search over HTTP and the one after it:

* gunicorn, ``tests/web_app/gunicorn.conf.py`` (the hooks of ``django_sbert.contrib.gunicorn``,
  one worker): ready when the worker logged "web process warmed" (``sbert/health/`` answers
  200 from then on); ``GET /api/sbert/search/``;
* uvicorn serving ``tests.asgi_app.warm_asgi`` (``django_sbert.contrib.asgi.warm_on_startup``):
  ready at "Application startup complete."; ``GET /api/sbert/search/``;
* the demo, ``example_project/demo.py --articles 20`` in a new folder: ready at "Serving at";
  ``GET /?q=`` (the search page, which also prints the server-side encode time).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode
from urllib.request import urlopen

from benchmarks.common import ROOT, add_json_option, cpu_line, load_average, write_json
from benchmarks.connections import free_port
from benchmarks.django_setup import embedded_database_url

QUERIES = ["central banks raise interest rates", "a new vaccine reduces infections"]
READY = {
    "gunicorn": "web process warmed",
    "uvicorn": "Application startup complete.",
    "demo": "Serving at",
}


def command(server: str, port: int, var_dir: Path) -> list[str]:
    if server == "gunicorn":
        return [sys.executable, "-m", "gunicorn", "-c", "tests/web_app/gunicorn.conf.py",
                "-b", f"127.0.0.1:{port}", "-w", "1"]  # fmt: skip
    if server == "uvicorn":
        return [sys.executable, "-m", "uvicorn", "tests.asgi_app.warm_asgi:application",
                "--host", "127.0.0.1", "--port", str(port), "--no-access-log"]  # fmt: skip
    return [sys.executable, "example_project/demo.py", "--port", str(port), "--articles", "20",
            "--var-dir", str(var_dir)]  # fmt: skip


def search_url(server: str, port: int, text: str) -> str:
    if server == "demo":
        return f"http://127.0.0.1:{port}/?{urlencode({'q': text})}"
    query = urlencode({"model": "testapp.article", "q": text, "k": 10})
    return f"http://127.0.0.1:{port}/api/sbert/search/?{query}"


def start(server: str, cache: Path, var_dir: Path, log: Path, cold: bool) -> dict:
    """Start ``server``, wait for its ready line, time two searches; stop it."""
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "benchmarks._serve_settings",
        "BENCH_COMPILE_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if cold:
        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="sbert-inductor-")
    if server == "demo":  # its own settings, database, broker and compile cache (in var_dir)
        for name in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "CELERY_BROKER_URL"):
            env.pop(name, None)
    spawned = time.monotonic()
    with log.open("wb") as output:
        process = subprocess.Popen(
            command(server, port, var_dir),
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        while READY[server] not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() - spawned > 1800:
                raise SystemExit(f"{server} never got ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        ready = time.monotonic() - spawned
        times, encode_ms = [], None
        for text in QUERIES:
            began = time.perf_counter()
            with urlopen(search_url(server, port, text), timeout=600) as response:
                body = response.read().decode()
            times.append(time.perf_counter() - began)
            found = re.search(r"encoding the query\s+([\d.,]+)\s*ms", body)
            if encode_ms is None and found:
                encode_ms = float(found.group(1).replace(",", ""))
    finally:
        # SIGINT is the demo's Ctrl-C (it stops its workers and database); SIGTERM the others'.
        os.killpg(process.pid, signal.SIGINT if server == "demo" else signal.SIGTERM)
        process.wait(timeout=120)
    result = {
        "ready_s": round(ready, 1),
        "first_search_ms": round(times[0] * 1000, 1),
        "next_search_ms": round(times[1] * 1000, 1),
    }
    if encode_ms is not None:
        result["first_encode_ms_in_server"] = encode_ms
    print(
        f"{server}, {'cold' if cold else 'warm'} compile cache: ready {ready:.1f} s after "
        f"spawn; first search {times[0] * 1000:.0f} ms"
        + (f" (encoding {encode_ms:.0f} ms in the server)" if encode_ms is not None else "")
        + f", next {times[1] * 1000:.0f} ms; load average {load_average()}",
        flush=True,
    )
    return result


def prepare_database() -> None:
    """Migrate the embedded database the gunicorn and uvicorn sites share."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks._serve_settings"
    os.environ.setdefault("BENCH_COMPILE_CACHE", tempfile.mkdtemp())
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    connections.close_all()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--servers", default="gunicorn,uvicorn,demo")
    add_json_option(parser)
    args = parser.parse_args()
    print(cpu_line())
    print(f"load average at start: {load_average()}", flush=True)
    servers = [name.strip() for name in args.servers.split(",") if name.strip()]
    if set(servers) - {"demo"}:
        embedded_database_url()
        prepare_database()
    figures: dict = {}
    for server in servers:
        folder = Path(tempfile.mkdtemp(prefix=f"sbert-first-search-{server}-"))
        cache, var_dir = folder / "compiled", folder / "var"
        figures[server] = {
            "cold": start(server, cache, var_dir, folder / "cold.log", cold=True),
            "warm": start(server, cache, var_dir, folder / "warm.log", cold=False),
        }
        shutil.rmtree(folder, ignore_errors=True)
    print(f"load average at the end: {load_average()}")
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
