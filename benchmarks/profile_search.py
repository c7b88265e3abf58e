"""Where one REST search's time goes: Django and DRF, query encoding, SQL round trips, PostgreSQL.

    flock /tmp/sbert-bench.lock .venv/bin/python -m benchmarks.profile_search [--json PATH]
    python -m benchmarks.profile_search --rows 1500 --queries 200 --cprofile 50

The site is the load test's (``benchmarks/load_site``: the REST API over the test app's
Article, registered with ``id``, ``title`` and ``embedding_version``; all-MiniLM-L6-v2 with
one torch thread and ``QUERY_THREADS`` 1, the default ``COMPILE="auto"`` path warmed as a web
process warms it; persistent connections), on one embedded PostgreSQL (the load test searches
a streaming replica: the same statements on another server). ``--rows`` SciFact abstracts
(title and first 300 characters, as ``benchmarks.load`` loads them) are loaded first, with their
vectors (encoded once and cached under ``artifacts/bench``, as ``benchmarks.search`` does).

Each request goes through Django's WSGI handler as gunicorn would call it (no HTTP parsing,
no socket). Per kind of search (text, more like this, hybrid), over ``--queries`` requests with
SciFact training claims never seen before (no query-cache hit) or random rows, it reports the
median of:

* ``total``: the WSGI call, response body included;
* ``encode``: the query encode (tokenizer, forward pass, pooling), inside the request;
* ``sql``: every statement's ``cursor.execute`` (round trip and PostgreSQL's work), and
  ``commit`` (Django's ``COMMIT`` of a search's transaction);
* ``python``: the rest (URL routing, DRF's request, permissions and query parameters, the ORM
  building and compiling SQL, model instances, the serializer, JSON);
* the round trips to PostgreSQL per request, counted from libpq's own trace (each time the
  client sent messages and then waited for the answer: ``BEGIN``, a statement, ``COMMIT``, a
  pipeline's statements sent together, its ``Sync``), with the statements by kind;

and, for the query encode alone (``--queries`` texts, one torch thread): tokenizer, forward
pass and the rest. For hybrid search, PostgreSQL's own per-part times from ``EXPLAIN ANALYZE``
of the fused statement (each side's scan, the fusion), and the word statistics' lookup.
``--cprofile N`` also prints cProfile's top functions over N text searches;
``--vector-storage main`` keeps the vectors in the row (docs/deployment.md, "Vector storage")
instead of pgvector's default, out of line.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from benchmarks.common import DATA, add_json_option, cpu_line, load_average, percentile, write_json
from benchmarks.django_setup import article_model, setup_django

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SCIFACT = DATA / "scifact"
KINDS = ("text", "similar", "hybrid")


def configure(rows: int) -> None:
    sbert = {
        "ENCODERS": {"default": {"MODEL": "all-MiniLM-L6-v2", "THREADS": 1}},
        "AUTO_EMBED": False,
        "RATES": {"search": None},
    }
    setup_django(
        sbert,
        database={"CONN_MAX_AGE": 600},
        ROOT_URLCONF="benchmarks.load_site.urls",
        ALLOWED_HOSTS=["127.0.0.1"],
        DEBUG=False,
        SECRET_KEY="django-sbert-profile-not-secret",
        MIDDLEWARE=["django.middleware.common.CommonMiddleware"],
    )


def load_rows(rows: int, storage: str = "external") -> None:
    """``rows`` SciFact abstracts as benchmarks.load loads them (title, first 300 characters),
    with their all-MiniLM-L6-v2 vectors (encoded once, cached under artifacts/bench), by COPY."""
    from benchmarks.hybrid import embedding_text, load_corpus
    from benchmarks.search import encode_cached

    docs = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open()][:rows]
    table = [{"title": d["title"][:300], "body": d["text"][:300]} for d in docs]
    vectors = encode_cached([embedding_text(row) for row in table], len(table), threads=1)
    if storage != "external":  # before the rows go in: they are written the new way
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                f"ALTER TABLE testapp_article ALTER COLUMN embedding SET STORAGE {storage}"
            )
    load_corpus(table, vectors)


def queries() -> list[str]:
    return [json.loads(line)["text"] for line in (SCIFACT / "queries-train.jsonl").open()]


# -- instruments ------------------------------------------------------------------------------


class Timers:
    """Seconds spent in the query encode and in SQL during one request, and what ran."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.encode = 0.0
        self.encode_cpu = 0.0
        self.sql = 0.0
        self.statements: Counter[str] = Counter()


def statement_kind(sql: str) -> str:
    text = " ".join(sql.split())
    if text.startswith("SELECT set_config"):
        return "set_config"
    if "django_sbert_encoderversion" in text:
        return "serving version"
    if "django_sbert_keyword_total" in text:
        return "word statistics"
    if "<=>" in text and "sbert_hybrid" in text:
        return "hybrid search"
    if "<=>" in text:
        return "vector search"
    if "@@" in text:
        return "keyword side"
    if text.startswith("SELECT") and '"testapp_article"' in text:
        return "row lookup"
    return text.split(" ", 1)[0].lower()


@contextmanager
def instrumented(timers: Timers):
    """Time the query encode and every statement (and COMMIT) on the default connection."""
    from django.db import connection

    from django_sbert.serving import cache

    encode = cache._encode_query

    def timed_encode(*args, **kwargs):
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            return encode(*args, **kwargs)
        finally:
            timers.encode += time.perf_counter() - started
            timers.encode_cpu += time.thread_time() - cpu

    def wrapper(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            timers.sql += time.perf_counter() - started
            timers.statements[statement_kind(sql)] += 1

    commit = connection._commit

    def timed_commit():
        started = time.perf_counter()
        try:
            return commit()
        finally:
            timers.sql += time.perf_counter() - started
            timers.statements["commit"] += 1

    cache._encode_query = timed_encode
    connection._commit = timed_commit
    try:
        with connection.execute_wrapper(wrapper):
            yield
    finally:
        cache._encode_query = encode
        del connection._commit


class RoundTrips:
    """Round trips to PostgreSQL on the default connection, from libpq's trace: each time the
    client sent messages and then waited for the server's answer (a run of ``F`` lines, then
    ``B`` lines). libpq buffers its trace, so it is read once tracing stopped."""

    def __init__(self) -> None:
        from django.db import connection

        connection.ensure_connection()
        self.pgconn = connection.connection.pgconn
        self.file = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (closed by count())
        self.pgconn.trace(self.file.fileno())
        self.pgconn.set_trace_flags(0)

    def count(self) -> int:
        """Stop tracing; the round trips since the start."""
        self.pgconn.untrace()
        self.file.seek(0)
        trips, last = 0, None
        for line in self.file.read().decode(errors="replace").splitlines():
            parts = line.split("\t")
            direction = parts[1] if len(parts) > 1 and parts[1] in ("F", "B") else parts[0]
            if direction == "B" and last == "F":
                trips += 1
            last = direction
        self.file.close()
        return trips


# -- requests ---------------------------------------------------------------------------------


def wsgi_get(handler, path: str) -> tuple[int, bytes]:
    """One GET through Django's WSGI handler, as gunicorn's sync worker calls it."""
    route, _, query = path.partition("?")
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": route,
        "QUERY_STRING": query,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8765",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "127.0.0.1:8765",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.input": io.BytesIO(b""),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    status: list[str] = []

    def start_response(line, headers, exc_info=None):
        status.append(line)

    response = handler(environ, start_response)
    try:
        body = b"".join(response)
    finally:
        response.close()
    return int(status[0].split()[0]), body


def search_path(kind: str, text: str, pk: int) -> str:
    if kind == "similar":
        return f"/api/sbert/similar/testapp.article/{pk}/?k=10"
    mode = "&mode=hybrid" if kind == "hybrid" else ""
    return f"/api/sbert/search/?model=testapp.article&k=10{mode}&q={quote(text)}"


def median(values: list[float]) -> float:
    return round(percentile(values, 50), 2)


def postgres_cpu() -> float:
    """CPU seconds (user + system) the default connection's PostgreSQL backend has used."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile_requests(kind: str, texts: list[str], pks: list[int]) -> dict:
    from django.core.handlers.wsgi import WSGIHandler

    from django_sbert.serving import clear_query_cache

    handler = WSGIHandler()
    timers = Timers()
    rng = random.Random(1)
    parts: dict[str, list[float]] = {"total": [], "encode": [], "sql": [], "python": []}
    cpu: dict[str, list[float]] = {"cpu": [], "encode_cpu": []}
    statements: Counter[str] = Counter()
    backend = postgres_cpu()
    trace = RoundTrips()
    with instrumented(timers):
        for text in texts:
            clear_query_cache()  # every text is encoded, as 809 claims cycling through 256 are
            path = search_path(kind, text, rng.choice(pks))
            timers.reset()
            started, cpu_started = time.perf_counter(), time.thread_time()
            status, body = wsgi_get(handler, path)
            total = time.perf_counter() - started
            cpu["cpu"].append((time.thread_time() - cpu_started) * 1000)
            cpu["encode_cpu"].append(timers.encode_cpu * 1000)
            if status != 200:
                raise SystemExit(f"{path} answered {status}: {body[:300]!r}")
            parts["total"].append(total * 1000)
            parts["encode"].append(timers.encode * 1000)
            parts["sql"].append(timers.sql * 1000)
            parts["python"].append((total - timers.encode - timers.sql) * 1000)
            statements.update(timers.statements)
    trips = trace.count()
    n = len(texts)
    return {
        "kind": kind,
        "requests": n,
        **{f"{name}_ms": median(values) for name, values in parts.items()},
        # CPU time: this process's (median per request), PostgreSQL's backend (mean)
        **{f"{name}_ms": median(values) for name, values in cpu.items()},
        "postgres_cpu_ms": round((postgres_cpu() - backend) * 1000 / n, 2),
        "round_trips": round(trips / n, 2),  # mean per request
        "statements": {k: round(v / n, 2) for k, v in sorted(statements.items())},
    }


def profile_encode(texts: list[str]) -> dict:
    """The query encode alone: tokenizer, forward pass (and pooling), as a search runs it."""
    import torch

    from django_sbert.serving import encode_query, get_encoder, role_prompt

    model = get_encoder("default")
    prompt = role_prompt("default", "query", model)
    tokenize, whole, tokens = [], [], []
    for text in texts:
        started = time.perf_counter()
        rows = model.tokenizer.truncated([text], prompt)
        tokenize.append((time.perf_counter() - started) * 1000)
        tokens.append(int(rows.lengths[0]))
        started = time.perf_counter()
        encode_query(text + " ")  # uncached: a text the process has not seen
        whole.append((time.perf_counter() - started) * 1000)
    return {
        "texts": len(texts),
        "tokens_median": statistics.median(tokens),
        "tokenize_ms": median(tokenize),
        "encode_ms": median(whole),
        "forward_and_rest_ms": round(median(whole) - median(tokenize), 2),
        "torch_threads": torch.get_num_threads(),
        "compiled": getattr(model, "compiled", None) is not None,
    }


def hybrid_plan(text: str) -> dict:
    """PostgreSQL's own times for the parts of one hybrid search (EXPLAIN ANALYZE)."""
    Article = article_model()

    qs = Article.objects.hybrid_search(text, k=10)[:10]
    plan = qs.explain(analyze=True)
    executed = re.search(r"Execution Time: ([\d.]+) ms", plan)
    planned = re.search(r"Planning Time: ([\d.]+) ms", plan)
    scans = {}
    for index in (i.name for i in Article._meta.indexes):  # the HNSW index, the keyword GIN
        times = [
            float(m.group(1))
            for line in plan.splitlines()
            if index in line
            for m in [re.search(r"actual time=[\d.]+\.\.([\d.]+)", line)]
            if m
        ]
        scans[index] = max(times) if times else None
    return {
        "planning_ms": float(planned.group(1)) if planned else None,
        "execution_ms": float(executed.group(1)) if executed else None,
        "scan_ms": scans,
        "plan": plan,
    }


def idf_lookup(texts: list[str]) -> float:
    """Median time of the keyword side's word statistics (BM25's idf of each word, read from
    the column's statistics tables in one statement), as a hybrid search looks them up."""
    from django_sbert.query.keywords import keyword_plan

    Article = article_model()

    field = Article._meta.get_field("embedding")
    times = []
    for text in texts:
        started = time.perf_counter()
        plan = keyword_plan(Article.objects.all(), field, text, "any", None)
        times.append((time.perf_counter() - started) * 1000)
        assert plan.bm25 is not None, "the column has no BM25 statistics"
    return median(times)


def cprofile_text(texts: list[str], pks: list[int], top: int) -> str:
    from django.core.handlers.wsgi import WSGIHandler

    from django_sbert.serving import clear_query_cache

    handler = WSGIHandler()
    profiler = cProfile.Profile()
    for text in texts:
        clear_query_cache()
        path = search_path("text", text, pks[0])
        profiler.enable()
        wsgi_get(handler, path)
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def loop_searches(kind: str, texts: list[str], pks: list[int], seconds: float) -> None:
    """Searches of ``kind`` through the WSGI handler, round and round ``texts`` (their vectors
    cached after the first round), for ``seconds``: the web process's own CPU per request."""
    from django.core.handlers.wsgi import WSGIHandler

    handler = WSGIHandler()
    for text in texts:
        wsgi_get(handler, search_path(kind, text, pks[0]))
    print(f"looping, pid {os.getpid()}", flush=True)
    started, cpu, requests = time.perf_counter(), time.process_time(), 0
    while time.perf_counter() - started < seconds:
        text = texts[requests % len(texts)]
        status, _ = wsgi_get(handler, search_path(kind, text, pks[requests % len(pks)]))
        assert status == 200, status
        requests += 1
    spent = (time.process_time() - cpu) * 1000 / requests
    print(f"{requests} requests, {spent:.2f} ms of this process's CPU each", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1500, help="SciFact abstracts loaded")
    parser.add_argument("--queries", type=int, default=200, help="requests per kind")
    parser.add_argument("--cprofile", type=int, default=0, help="also cProfile N text searches")
    parser.add_argument("--plan", action="store_true", help="print the hybrid plan")
    parser.add_argument(
        "--loop",
        type=float,
        default=0,
        help="instead: repeat 50 searches (vectors cached) for this many seconds, for a "
        "sampling profiler (py-spy record --pid ...), and print the CPU per request",
    )
    parser.add_argument(
        "--loop-kind", choices=KINDS, default="text", help="the searches --loop repeats"
    )
    parser.add_argument(
        "--vector-storage",
        choices=["main", "plain", "external"],
        default="external",
        help="storage of the vector column (external: pgvector's default, out of line)",
    )
    add_json_option(parser)
    args = parser.parse_args()
    print(cpu_line(), flush=True)
    configure(args.rows)
    print(f"load average at start: {load_average()}", flush=True)
    load_rows(args.rows, args.vector_storage)

    from django.core.management import call_command

    from django_sbert.serving.warmup import warm

    Article = article_model()

    call_command("check", verbosity=0)
    states = warm(["default"], role="query")  # as a web process warms before its first request
    print(f"warmed: {states['default'].path} ({states['default'].reason})", flush=True)
    pks = list(Article.objects.values_list("pk", flat=True))
    texts = queries()
    rng = random.Random(0)
    rng.shuffle(texts)
    if args.loop:
        loop_searches(args.loop_kind, texts[:50], pks[:50], args.loop)
        return
    warmup, texts = texts[:20], texts[20 : 20 + args.queries * len(KINDS)]
    for kind in KINDS:  # connections, plans and the handler's middleware, warm
        profile_requests(kind, warmup, pks)
    results = []
    for i, kind in enumerate(KINDS):
        chunk = texts[i * args.queries : (i + 1) * args.queries]
        results.append(profile_requests(kind, chunk, pks))
        print(json.dumps(results[-1]), flush=True)
    encode = profile_encode(texts[: args.queries])
    print("query encode alone:", json.dumps(encode), flush=True)
    plan = hybrid_plan(texts[0])
    idf = idf_lookup(texts[: args.queries])
    print(
        f"hybrid, PostgreSQL's own: planning {plan['planning_ms']} ms, execution "
        f"{plan['execution_ms']} ms, scans (end time) {plan['scan_ms']}; word statistics {idf} ms "
        "(its round trip included)",
        flush=True,
    )
    if args.plan:
        print(plan["plan"])
    if args.cprofile:
        print(cprofile_text(texts[: args.cprofile], pks, 40))
    print(f"load average at the end: {load_average()}")
    keys = ["kind", "total_ms", "encode_ms", "sql_ms", "python_ms", "round_trips", "cpu_ms",
            "encode_cpu_ms", "postgres_cpu_ms"]  # fmt: skip
    print("\n| " + " | ".join(keys) + " | statements per request |")
    print("|" + "---|" * (len(keys) + 1))
    for result in results:
        statements = ", ".join(f"{k} {v:g}" for k, v in result["statements"].items())
        print("| " + " | ".join(str(result[k]) for k in keys) + f" | {statements} |")
    write_json(
        args.json,
        {
            "requests": results,
            "query encode alone": encode,
            "hybrid plan": {k: v for k, v in plan.items() if k != "plan"},
            "word statistics ms": idf,
        },
    )


if __name__ == "__main__":
    main()
