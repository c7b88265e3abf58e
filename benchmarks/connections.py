"""Searches per second over HTTP: a connection per request vs persistent connections vs a pool.

gunicorn (``tests/web_app/gunicorn.conf.py``: 2 sync worker processes warmed at start by
``django_sbert.contrib.gunicorn``) serves the REST search (``GET /api/sbert/search/``, k=10)
over the SciFact corpus (5,183 abstracts as ``testapp.Article`` rows) on an embedded
PostgreSQL + pgvector. Each configuration runs ``--rounds`` times, interleaved, ``--seconds``
each, with ``--clients`` concurrent clients (threads of this process, one request at a time
each) sending SciFact training claims in turn: 809 distinct texts, more than a process's query
cache holds, so every search encodes its text. Reported: the median searches/s of each
configuration and its ratio to the per-request one, and the median p50 / p99 latency.

The rows' vectors are random unit vectors stamped with the serving version: what a search
costs (encode the text, one HNSW scan, fetch 10 rows) does not depend on their values, and
encoding 5,183 abstracts would take minutes of the shared CPUs.

    flock /tmp/sbert-bench.lock .venv/bin/python -m benchmarks.connections [--json PATH]
    python -m benchmarks.connections --rounds 1 --seconds 5   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from http.client import HTTPConnection
from pathlib import Path
from urllib.parse import urlencode

import numpy as np

from benchmarks.common import DATA, ROOT, add_json_option, cpu_line, p50_p99, write_json
from benchmarks.django_setup import article_model, embedded_database_url

SETTINGS = "benchmarks._web_settings"
MODES = ("per-request", "persistent", "pool")


def load_corpus(rows: int) -> tuple[list[tuple[str, str]], list[str]]:
    """(title, abstract) of the SciFact corpus and its training claims."""
    corpus = []
    for line in (DATA / "scifact/corpus.jsonl").open(encoding="utf-8"):
        doc = json.loads(line)
        corpus.append((doc["title"][:300], doc["text"]))
    claims = [
        json.loads(line)["text"]
        for line in (DATA / "scifact/queries-train.jsonl").open(encoding="utf-8")
    ]
    return corpus[:rows], claims


def prepare_database(corpus: list[tuple[str, str]]) -> None:
    """Migrate and insert the rows with random unit vectors of the serving version."""
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from django_sbert.serving import serving_version

    Article = article_model()

    call_command("migrate", verbosity=0)
    version = serving_version("default")
    field = Article._meta.get_field("embedding")
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(corpus), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    Article.objects.all().delete()
    Article.objects.bulk_create(
        Article(
            title=title,
            body=body,
            embedding=vector,
            embedding_version=version,
            embedding_hash=field.text_hash(f"{title}\n{body}"),
        )
        for (title, body), vector in zip(corpus, vectors, strict=True)
    )
    connections.close_all()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_gunicorn(mode: str, workers: int, log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "BENCH_CONNECTIONS": mode}
    command = [
        sys.executable, "-m", "gunicorn", "-c", "tests/web_app/gunicorn.conf.py",
        "-b", f"127.0.0.1:{port}", "-w", str(workers),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 180
    while log.read_text(errors="replace").count("web process warmed") < workers:
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"gunicorn did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return process, port


def drive(
    port: int, claims: list[str], clients: int, seconds: float
) -> tuple[int, int, list[float]]:
    """(searches answered 200, other answers, latencies in seconds) over ``seconds``."""
    done = [0, 0]
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(offset: int) -> None:
        i = offset
        while time.monotonic() < deadline:
            query = urlencode({"model": "testapp.article", "q": claims[i % len(claims)], "k": 10})
            i += clients
            started = time.perf_counter()
            connection = HTTPConnection("127.0.0.1", port, timeout=30)  # sync workers close it
            connection.request("GET", f"/api/sbert/search/?{query}")
            response = connection.getresponse()
            response.read()
            connection.close()
            elapsed = time.perf_counter() - started
            with lock:
                done[0 if response.status == 200 else 1] += 1
                latencies.append(elapsed)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done[0], done[1], latencies


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5183)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn processes")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    add_json_option(parser)
    args = parser.parse_args()

    print(cpu_line())
    embedded_database_url()
    corpus, claims = load_corpus(args.rows)
    prepare_database(corpus)
    print(
        f"{len(corpus)} rows, {len(claims)} distinct query texts, {args.workers} gunicorn "
        f"processes, {args.clients} clients, {args.seconds:.0f} s x {args.rounds} rounds"
    )
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"sbert-bench-connections-{os.getpid()}"
    logs.mkdir(exist_ok=True)
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    p50s: dict[str, list[float]] = {mode: [] for mode in MODES}
    p99s: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_number in range(args.rounds):
        for mode in MODES:
            log = logs / f"{mode}-{round_number + 1}.log"
            process, port = start_gunicorn(mode, args.workers, log)
            try:
                drive(port, claims[::-1], args.clients, 2.0)  # first requests of each process
                ok, failed, latencies = drive(port, claims, args.clients, args.seconds)
            finally:
                process.terminate()
                process.wait(timeout=60)
            if failed:
                raise RuntimeError(f"{mode}: {failed} answers were not 200 (see {log})")
            p50, p99 = p50_p99([seconds * 1000 for seconds in latencies])
            rates[mode].append(ok / args.seconds)
            p50s[mode].append(p50)
            p99s[mode].append(p99)
            print(
                f"round {round_number + 1} {mode:>11}: {ok / args.seconds:6.1f} searches/s  "
                f"p50 {p50:5.1f} ms  p99 {p99:6.1f} ms",
                flush=True,
            )
    base = statistics.median(rates["per-request"])
    print("\nmedian over rounds:")
    figures = {}
    for mode in MODES:
        rate = statistics.median(rates[mode])
        p50, p99 = statistics.median(p50s[mode]), statistics.median(p99s[mode])
        print(
            f"  {mode:>11}: {rate:6.1f} searches/s ({rate / base:.2f}x per-request)  "
            f"p50 {p50:5.1f} ms  p99 {p99:6.1f} ms"
        )
        figures[mode] = {
            "searches_per_s": round(rate, 1),
            "x_per_request": round(rate / base, 2),
            "p50_ms": round(p50, 1),
            "p99_ms": round(p99, 1),
        }
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
