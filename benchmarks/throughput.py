"""Searches per second that the documented web shape serves, with and without the host's
query server (``manage.py sbert_query_server``), measured in the same run.

    flock /tmp/sbert-bench.lock .venv/bin/python -m benchmarks.throughput [--rounds 3] \\
        [--seconds 15] [--clients 4 16] [--server-flags "--concurrency 1" ""] [--json PATH]

What runs, all on 127.0.0.1 and started by this script: an embedded PostgreSQL with pgvector
holding the 5,183 SciFact abstracts (title and first 300 characters, as ``benchmarks.load``;
vectors kept in the row), and two gunicorn sites of the load test's configuration
(``benchmarks/load_site``: 2 sync processes, the ``django_sbert.contrib.gunicorn`` hooks,
``CONN_MAX_AGE`` 600, one torch thread each): *in-process* encodes each search's text in the
web process that serves it (the default, sync workers), *query server* sends it to one
``sbert_query_server`` (every CPU, the default settings: batches of up to 16, no window, as
many queries at once as CPUs) from gthread workers of ``--web-threads`` threads (8), so
that searches wait on it together. ``--server-flags`` runs one query-server site per string of
the command's flags (``"--concurrency 1" ""``: one encoding thread, then the defaults), side by
side. Only one site is sent searches at a time; the others sit idle.

Clients: ``benchmarks.load_client`` (a process of its own, asyncio) sends REST text searches
(``k=10``) back to back over ``--clients`` connections for ``--seconds``. Texts come from
../shared/data only (SciFact's train claims, then the abstracts' titles and first
sentences, about 11,000): ``unique`` draws each text once across the whole run, so neither
the processes' caches nor the server's carry it (the server's cache is emptied before each
of its windows too); ``zipf`` draws from the same texts with probability 1 / rank (head
queries repeat), and says the server's cache hit rate. Rounds interleave the setups, and the
medians over rounds are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from benchmarks.common import ROOT, add_json_option, cpu_line, load_average, percentile, write_json
from benchmarks.django_setup import article_model, embedded_database_url
from benchmarks.load import Proc, keep_vectors_inline, scifact, short
from django_sbert.encoder.paths import QUERY_RUNTIMES

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def query_texts(docs: list[dict], claims: list[str]) -> list[str]:
    """Distinct search texts: the train claims, then titles, then abstracts' first sentences."""
    seen: dict[str, None] = {}
    for text in [*claims, *(d["title"] for d in docs)]:
        seen.setdefault(text.strip(), None)
    for doc in docs:
        sentence = re.split(r"(?<=[.!?])\s", doc["text"].strip(), maxsplit=1)[0][:200]
        seen.setdefault(sentence, None)
    return [text for text in seen if 3 <= len(text.split()) <= 40]


Groups = dict[str, Callable[[], list[int]]]


def run_clients(port: int, clients: int, seconds: float, texts: list[str], order: str,
                work: Path, groups: Groups) -> tuple[list[list], dict]:  # fmt: skip
    """The clients' records of one window, and the CPU seconds each group of processes used
    during it (``groups``: name -> the pids to count)."""
    queries, pks, out = work / "queries.json", work / "pks.json", work / "searches.json"
    queries.write_text(json.dumps(texts))
    pks.write_text("[]")
    client = subprocess.Popen([
        sys.executable, "-m", "benchmarks.load_client", "--port", str(port),
        "--clients", str(clients), "--queries", str(queries), "--pks", str(pks),
        "--out", str(out), "--mix", "text", "--order", order,
    ], cwd=ROOT)  # fmt: skip
    counted = {**groups, "client": lambda: [client.pid]}
    before = {name: cpu_seconds(pids()) for name, pids in counted.items()}
    time.sleep(seconds)
    used = {name: cpu_seconds(pids()) - before[name] for name, pids in counted.items()}
    client.send_signal(signal.SIGTERM)
    client.wait(timeout=120)
    return json.loads(out.read_text()), used


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (those gone count nothing)."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def tree(pid: int | None) -> list[int]:
    """``pid`` and its descendants."""
    if pid is None:
        return []
    try:
        process = psutil.Process(pid)
        return [pid, *(child.pid for child in process.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def postgres_pids() -> list[int]:
    return [p.pid for p in psutil.process_iter(["username"]) if p.info["username"] == "pgserver"]


def summarize(records: list[list], seconds: float) -> dict:
    ms = [r[3] * 1000 for r in records if r[2] == 200]
    return {
        "searches_per_s": round(len(records) / seconds, 1),
        "p50_ms": round(percentile(ms, 50), 1),
        "p99_ms": round(percentile(ms, 99), 1),
        "errors": sum(1 for r in records if r[2] != 200),
        "status_503": sum(1 for r in records if r[2] == 503),
    }


def wait_ready(port: int, proc: Proc, timeout: float = 600) -> None:
    import http.client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.popen is not None and proc.popen.poll() is None, proc.log.read_text()[-3000:]
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("GET", "/api/sbert/search/?model=testapp.article&k=1&q=warm")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    raise TimeoutError(f"{proc.name} not ready: {proc.log.read_text()[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precision", default="auto", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--query-runtime", default="auto", choices=QUERY_RUNTIMES)
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each window")
    parser.add_argument("--clients", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--orders", nargs="+", default=["unique", "zipf"])
    parser.add_argument("--port", type=int, default=8775)
    parser.add_argument(
        "--web-threads",
        type=int,
        default=8,
        help="threads of each web process of the query-server site (gthread workers)",
    )
    parser.add_argument(
        "--server-threads", type=int, help="torch threads of the query server (default: all)"
    )
    parser.add_argument(
        "--server-flags",
        nargs="+",
        default=[""],
        help="flags of sbert_query_server, one string per query-server site (default: one "
        "site, the command's defaults); several: the sites side by side in the run",
    )
    add_json_option(parser)
    args = parser.parse_args()

    print(cpu_line(), f"load average {load_average()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="sbert-throughput-"))
    url = embedded_database_url()
    base_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "benchmarks.load_site.settings",
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": url,
        "REPLICA_URL": url,  # searches read the one database
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/11",
        "SBERT_MODEL_DIR": str(work / "storage"),
        "SBERT_MODEL_CACHE": str(work / "cache"),  # one host: one cache, one compiled graph
        "SBERT_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "SBERT_PRECISION": args.precision,
        "SBERT_QUERY_RUNTIME": args.query_runtime,
    }
    os.environ.update({**base_env, "SBERT_THREADS": "2", "OMP_NUM_THREADS": "2"})
    import django

    django.setup()
    from django.core.management import call_command

    from django_sbert import indexing
    from django_sbert.serving.query_server import server_stats

    Article = article_model()
    call_command("migrate", verbosity=0)
    keep_vectors_inline("main")
    docs, _, claims = scifact(5183, reserve=0)
    if not Article.objects.exists():
        started = time.perf_counter()
        Article.objects.bulk_create(Article(title=t, body=b) for t, b in map(short, docs))
        indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
        print(f"{len(docs)} rows embedded in {time.perf_counter() - started:.0f} s", flush=True)
    texts = query_texts(docs, claims)
    print(f"{len(texts)} distinct query texts", flush=True)

    config = ROOT / "benchmarks/load_site/gunicorn.conf.py"
    gunicorn = [str(ROOT / ".venv/bin/gunicorn"), "-c", str(config)]
    threads = ["--threads", str(args.server_threads)] if args.server_threads else []
    # site name -> (port, the web processes' extra environment, its query server or None)
    sites: dict[str, tuple[int, dict[str, str], str | None]] = {"in-process": (args.port, {}, None)}
    procs: dict[str, Proc] = {}
    for index, flags in enumerate(args.server_flags, start=1):
        name = f"query server {flags}".strip()
        socket = str(work / f"query-{index}.sock")
        procs[f"{name} process"] = Proc(
            f"{name} process",
            [sys.executable, "-m", "django", "sbert_query_server", "--socket", socket,
             *threads, *shlex.split(flags)],
            {**base_env, "SBERT_THREADS": "2", "OMP_NUM_THREADS": "2"},
            work / f"query-server-{index}.log",
        )  # fmt: skip
        extra = {"SBERT_QUERY_SOCKET": socket, "LOAD_WEB_THREADS": str(args.web_threads)}
        sites[name] = (args.port + index, extra, socket)
    for name, (port, extra, _) in sites.items():
        procs[name] = Proc(
            name,
            gunicorn,
            {**base_env, "LOAD_BIND": f"127.0.0.1:{port}", **extra},
            work / f"web-{name.replace(' ', '-').replace(',', '')}.log",
        )
    results: dict[str, dict[str, list[dict]]] = {}
    next_text = 0
    try:
        for name, (_, _, socket) in sites.items():
            if socket is None:
                continue
            server = procs[f"{name} process"]
            server.start()
            deadline = time.monotonic() + 600
            while "Query server ready" not in server.log.read_text():
                assert time.monotonic() < deadline, server.log.read_text()[-3000:]
                time.sleep(0.5)
        for name, (port, _, _) in sites.items():
            procs[name].start()
            wait_ready(port, procs[name])
        print(f"processes up; logs in {work}", flush=True)
        for round_number in range(1, args.rounds + 1):
            for order in args.orders:
                for clients in args.clients:
                    for name, (port, _, socket) in sites.items():
                        if socket is not None:
                            server_stats(socket, clear=True)
                        if order == "unique":  # each text once in the whole run
                            run_texts = texts[next_text:] + texts[:next_text]
                        else:
                            run_texts = texts
                        server = procs.get(f"{name} process")  # None: the in-process site
                        groups = {
                            "web": lambda name=name: tree(procs[name].popen.pid),
                            "query server": lambda server=server: tree(
                                server.popen.pid if server else None
                            ),
                            "postgres": postgres_pids,
                        }
                        records, used = run_clients(
                            port, clients, args.seconds, run_texts, order, work, groups
                        )
                        if order == "unique":
                            next_text = (next_text + len(records) + 64) % len(texts)
                        figures = summarize(records, args.seconds)
                        for group, seconds in used.items():  # CPU ms per search
                            figures[f"cpu_ms_{group.replace(' ', '_')}"] = round(
                                1000 * seconds / max(len(records), 1), 2
                            )
                        if socket is not None:
                            stats = server_stats(socket)
                            figures["cache_hit_rate"] = round(
                                stats["cache_hits"] / max(stats["requests"], 1), 3
                            )
                            figures["mean_batch"] = round(
                                stats["encoded"] / max(stats["batches"], 1), 2
                            )
                        key = f"{order}, {clients} clients"
                        results.setdefault(key, {}).setdefault(name, []).append(figures)
                        print(f"round {round_number} {key} {name}: {figures} "
                              f"(load {load_average()})", flush=True)  # fmt: skip
    finally:
        for proc in procs.values():
            if proc.popen is not None:
                proc.stop()
    medians = {
        key: {
            name: {field: statistics.median(run[field] for run in runs) for field in runs[0]}
            for name, runs in by_site.items()
        }
        for key, by_site in results.items()
    }
    print("\nmedians over rounds:")
    for key, by_site in medians.items():
        for name, figures in by_site.items():
            print(f"  {key:>22} | {name:>12} | {figures}")
    print(f"load average at the end {load_average()}")
    write_json(args.json, {"runs": results, "medians": medians, "texts": len(texts)})


if __name__ == "__main__":
    main()
