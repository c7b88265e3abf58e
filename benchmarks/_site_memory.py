"""``benchmarks.memory --layouts``: the memory of a site's processes in each web layout.

What runs, all started here on 127.0.0.1: an embedded PostgreSQL with pgvector holding the
first ``--rows`` SciFact abstracts (title and first 300 characters, embedded by the real
model), the host's query server (``manage.py sbert_query_server``, every CPU) and, one layout
at a time, gunicorn with the load test's site (``benchmarks/load_site``: sync workers, the
``django_sbert.contrib.gunicorn`` hooks, one torch thread each):

* ``in-process``: ``SOCKET`` None, each web process loads the model (``--workers``);
* ``server + in-process``: ``SOCKET`` ``[path, "in-process"]``, each web process asks the
  server and loads the model to fall back on (what every process with a socket did before);
* ``light``: ``SOCKET`` a path, web processes load no model (``--light-workers``, 9: the
  2 x cores + 1 of a 4-core host).

Each layout's web processes are warmed by 40 semantic (``mode=vector``) and 40 hybrid REST
searches per process, sent from as many threads as processes, so every process serves some;
then each web process's RSS and PSS (``/proc/<pid>/smaps_rollup``), the heavy libraries it
imported (the site's ``probe/``), the query server's RSS and PSS, and the host's total for 9
web processes plus the encoder: measured for the light layout (the sum of their PSS, and of
their RSS), 9 x the median web RSS for the others (their processes share next to nothing).
Medians over ``--rounds`` runs; the query server is restarted for each run.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from urllib.request import urlopen

import psutil

from benchmarks.common import ROOT, load_average
from benchmarks.django_setup import article_model, embedded_database_url
from benchmarks.load import Proc, keep_vectors_inline, scifact, short
from benchmarks.throughput import query_texts, wait_ready

HOST_WEB_PROCESSES = 9  # 2 x cores + 1 on a 4-core host: the sizing
SEARCHES_PER_PROCESS = 40  # of each mode, semantic and hybrid
MB = 2**20


def memory(pid: int) -> dict[str, float]:
    """RSS and PSS of one process, in MB."""
    info = psutil.Process(pid).memory_full_info()
    return {"rss_mb": round(info.rss / MB, 1), "pss_mb": round(info.pss / MB, 1)}


def search(port: int, text: str, mode: str) -> int:
    query = urlencode({"model": "testapp.article", "q": text, "mode": mode, "k": 10})
    with urlopen(f"http://127.0.0.1:{port}/api/sbert/search/?{query}", timeout=60) as answer:
        body = json.loads(answer.read())
        assert "degraded" not in body, body  # the server answered: searches by meaning
        return answer.status


def probe(port: int) -> dict[str, Any]:
    with urlopen(f"http://127.0.0.1:{port}/probe/", timeout=60) as answer:
        return json.loads(answer.read())


def warm_site(port: int, workers: int, texts: list[str]) -> dict[int, list[str]]:
    """Semantic and hybrid searches from ``workers`` threads; then the heavy libraries each
    process imported (its pid -> names), asked until every process answered."""
    jobs = [(text, mode) for text in texts for mode in ("vector", "hybrid")]
    with ThreadPoolExecutor(workers) as pool:
        statuses = list(pool.map(lambda job: search(port, *job), jobs))
    assert set(statuses) == {200}, statuses
    heavy: dict[int, list[str]] = {}
    deadline = time.monotonic() + 60
    with ThreadPoolExecutor(workers) as pool:
        while len(heavy) < workers and time.monotonic() < deadline:
            for answer in pool.map(lambda _: probe(port), range(workers * 2)):
                heavy[answer["pid"]] = answer["heavy"]
    return heavy


def layouts(socket: str, args: Any) -> dict[str, tuple[int, dict[str, str]]]:
    return {
        "in-process": (args.workers, {}),
        "server + in-process": (
            args.workers,
            {"SBERT_QUERY_SOCKET": socket, "SBERT_QUERY_FALLBACK": "in-process"},
        ),
        "light": (args.light_workers, {"SBERT_QUERY_SOCKET": socket}),
    }


def one_run(args: Any, base_env: dict[str, str], work: Path, texts: list[str]) -> dict:
    socket = str(work / "query.sock")
    server = Proc(
        "query-server",
        [sys.executable, "-m", "django", "sbert_query_server", "--socket", socket],
        {**base_env, "SBERT_THREADS": "2", "OMP_NUM_THREADS": "2"},
        work / "query-server.log",
    )
    server.start()
    figures: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 600
        while "Query server ready" not in server.log.read_text():
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.5)
        for offset, (name, (workers, extra)) in enumerate(layouts(socket, args).items()):
            port = args.port + offset
            env = {
                **base_env,
                **extra,
                "LOAD_BIND": f"127.0.0.1:{port}",
                "LOAD_WEB_WORKERS": str(workers),
            }
            config = ROOT / "benchmarks/load_site/gunicorn.conf.py"
            site = Proc(
                name,
                [sys.executable, "-m", "gunicorn", "-c", str(config)],
                env,
                work / f"web-{name.replace(' ', '-')}.log",
            )
            site.start()
            try:
                wait_ready(port, site)
                first = offset * SEARCHES_PER_PROCESS * HOST_WEB_PROCESSES
                heavy = warm_site(
                    port, workers, texts[first : first + SEARCHES_PER_PROCESS * workers]
                )
                master = psutil.Process(site.popen.pid)
                web = {child.pid: memory(child.pid) for child in master.children()}
                figures[name] = {
                    "workers": workers,
                    "web": web,
                    "master": memory(master.pid),
                    "heavy": {str(pid): names for pid, names in heavy.items()},
                    "encoder": memory(server.popen.pid),
                }
                imported = sorted({n for names in heavy.values() for n in names})
                rss = sorted(m["rss_mb"] for m in web.values())
                pss = sorted(m["pss_mb"] for m in web.values())
                print(
                    f"  {name}: web RSS {rss} PSS {pss} MB, master {figures[name]['master']}, "
                    f"encoder {figures[name]['encoder']}, heavy {imported}",
                    flush=True,
                )
            finally:
                site.stop()
    finally:
        server.stop()
    return figures


def summary(run: dict) -> dict[str, dict[str, float]]:
    """Per layout: the median web process, the encoder, and the host's 9 + encoder."""
    out: dict[str, dict[str, float]] = {}
    for name, layout in run.items():
        rss = statistics.median(m["rss_mb"] for m in layout["web"].values())
        pss = statistics.median(m["pss_mb"] for m in layout["web"].values())
        light = name == "light"
        encoder = layout["encoder"] if name != "in-process" else {"rss_mb": 0.0, "pss_mb": 0.0}
        if light and layout["workers"] == HOST_WEB_PROCESSES:
            web_rss = sum(m["rss_mb"] for m in layout["web"].values())
            web_pss = sum(m["pss_mb"] for m in layout["web"].values())
        else:
            web_rss, web_pss = HOST_WEB_PROCESSES * rss, HOST_WEB_PROCESSES * pss
        out[name] = {
            "web_rss_mb": rss,
            "web_pss_mb": pss,
            "web_max_rss_mb": max(m["rss_mb"] for m in layout["web"].values()),
            "encoder_rss_mb": encoder["rss_mb"],
            "host_rss_mb": round(web_rss + layout["master"]["rss_mb"] + encoder["rss_mb"], 1),
            "host_pss_mb": round(web_pss + layout["master"]["pss_mb"] + encoder["pss_mb"], 1),
            "torch_in_web": float(any("torch" in v for v in layout["heavy"].values())),
        }
    return out


def measure_layouts(args: Any) -> dict:
    print(f"load average {load_average()}", flush=True)  # the CPU line: benchmarks.memory
    work = Path(tempfile.mkdtemp(prefix="sbert-memory-"))
    url = embedded_database_url()
    base_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "benchmarks.load_site.settings",
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": url,
        "REPLICA_URL": url,
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/11",
        "SBERT_MODEL_DIR": str(work / "storage"),
        "SBERT_MODEL_CACHE": str(work / "cache"),
        "SBERT_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }
    os.environ.update({**base_env, "SBERT_THREADS": "2", "OMP_NUM_THREADS": "2"})
    import django

    django.setup()
    from django.core.management import call_command

    from django_sbert import indexing

    Article = article_model()
    call_command("migrate", verbosity=0)
    keep_vectors_inline("main")
    docs, _, claims = scifact(args.rows, reserve=0)
    started = time.perf_counter()
    Article.objects.bulk_create(Article(title=t, body=b) for t, b in map(short, docs))
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    print(f"{len(docs)} rows embedded in {time.perf_counter() - started:.0f} s", flush=True)
    corpus, _, train_claims = scifact(5183, reserve=0)
    texts = query_texts(corpus, train_claims)  # distinct: no cache carries a warm-up search
    runs = []
    for number in range(1, args.rounds + 1):
        print(f"run {number}:", flush=True)
        runs.append(one_run(args, base_env, work, texts[number * 1500 :]))
    summaries = [summary(run) for run in runs]
    medians = {
        name: {key: statistics.median(s[name][key] for s in summaries) for key in keys}
        for name, keys in summaries[0].items()
    }
    print(f"\nmedians over {len(runs)} runs (MB; host: {HOST_WEB_PROCESSES} web + encoder):")
    for name, figures in medians.items():
        print(f"  {name:>20} | {figures}")
    print(f"load average at the end {load_average()}")
    return {"runs": runs, "medians": medians, "rows": len(docs), "logs": str(work)}
