"""Indexing throughput of the documented worker command against sentence-transformers.

The worker is ``celery -A proj worker -Q sbert --pool solo`` exactly as the docs give it: no
``-c``, ``THREADS`` unset, so ``serving.worker`` decides torch's threads (every CPU for a solo
pool). Rows go from ``save()`` to stored vector through Redis and PostgreSQL
(``benchmarks.ingest``); in the same run and on the same texts, sentence-transformers'
``encode`` with torch on every CPU and the same batch size is the peer. Rounds alternate the
two, so a change of machine load weighs on both.

    python -m benchmarks.worker_throughput [--rows 300] [--rounds 2] [--threads N] [--json PATH]

``--threads N`` sets ``THREADS`` instead (``--threads 1``: what a ``--pool solo`` worker
without ``-c`` gave torch before the pool decided, CPUs / CPU count).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, add_json_option, cpu_line, load_average, write_json
from benchmarks.django_setup import embedded_database_url
from benchmarks.ingest import MODEL, WorkerProcess, celery_app, ingest, setup_django, wikinews


def run_worker(args: argparse.Namespace) -> None:
    """``celery worker -Q <queue> --pool solo`` in this process (the documented command)."""
    setup_django(args)
    app = celery_app()
    app.worker_main(
        ["worker", "-Q", args.queue, "--pool", "solo", "-l", "INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{args.queue}@%h"]
    )  # fmt: skip


class SoloWorker(WorkerProcess):
    """``benchmarks.ingest``'s worker subprocess, started through this module's ``--worker``."""

    def __init__(self, args: argparse.Namespace, log: Path) -> None:
        self.log_path = log
        self.log = log.open("wb")
        command = [sys.executable, "-m", "benchmarks.worker_throughput", "--worker",
                   "--queue", args.queue, "--batch-size", str(args.batch_size)]  # fmt: skip
        if args.threads:
            command += ["--threads", str(args.threads)]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=dict(os.environ), stdout=self.log, stderr=subprocess.STDOUT
        )


def peer_encode(model, texts: list[str], batch_size: int) -> float:
    """Seconds sentence-transformers' ``encode`` takes for ``texts`` (after a warm-up batch)."""
    model.encode(texts[:batch_size], batch_size=batch_size)
    started = time.perf_counter()
    model.encode(texts, batch_size=batch_size)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tx-rows", type=int, default=50, help="saves per transaction (task)")
    parser.add_argument("--threads", type=int, default=None, help="THREADS (default: unset)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--queue", default=f"sbert-solo-{os.getpid()}")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return

    import torch

    from django_sbert.encoder import resolve_model_path

    cpus = len(os.sched_getaffinity(0))
    print(cpu_line(), flush=True)
    print(f"load average at start: {load_average()}", flush=True)
    embedded_database_url()  # before the worker starts: it inherits DATABASE_URL
    setup_django(args)
    from django.core.management import call_command
    from django.db import connection
    from sentence_transformers import SentenceTransformer

    celery_app()
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE testapp_article RESTART IDENTITY CASCADE")
    torch.set_num_threads(cpus)
    peer = SentenceTransformer(str(resolve_model_path(MODEL)), device="cpu")
    rows = wikinews(args.rows)
    log = Path(tempfile.mkdtemp(prefix="sbert-solo-worker-")) / "worker.log"
    worker = SoloWorker(args, log)
    peer_total = ingest_total = 0.0
    try:
        worker.wait_for("ready.")
        # Compiling at the warm-up takes minutes on a loaded machine.
        worker.wait_for("loaded encoders", timeout=1800)  # idle from here on: the peer alone
        threads = re.search(r"loaded encoders .* with (\d+) torch threads", log.read_text())
        worker_threads = int(threads.group(1)) if threads else 0
        print(
            f"{len(rows)} Wikinews articles, {MODEL}, batch {args.batch_size}; worker "
            f"--pool solo, THREADS {args.threads}: {worker_threads} torch threads; "
            f"sentence-transformers: {cpus} torch threads",
            flush=True,
        )
        size = -(-len(rows) // args.rounds)
        for number, start in enumerate(range(0, len(rows), size), 1):
            part = rows[start : start + size]
            raw = peer_encode(peer, [f"{t}\n{b}" for t, b in part], args.batch_size)
            _, done = ingest(part, args.tx_rows, args.timeout)
            peer_total, ingest_total = peer_total + raw, ingest_total + done
            print(
                f"round {number}: {len(part)} rows: sentence-transformers encode "
                f"{len(part) / raw:6.1f} rows/s; worker {len(part) / done:6.1f} rows/s "
                f"(save to vector)",
                flush=True,
            )
    finally:
        worker.stop()
    figures = {
        "rows": len(rows),
        "worker_threads": worker_threads,
        "threads_setting": args.threads,
        "worker_rows_per_s": round(len(rows) / ingest_total, 1),
        "sentence_transformers_rows_per_s": round(len(rows) / peer_total, 1),
    }
    print(
        f"total: worker {figures['worker_rows_per_s']} rows/s ({worker_threads} torch threads), "
        f"sentence-transformers encode {figures['sentence_transformers_rows_per_s']} rows/s: "
        f"worker / peer = {peer_total / ingest_total:.1%}; load average at the end: "
        f"{load_average()}; worker log: {log}"
    )
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
