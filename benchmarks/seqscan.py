"""Does a vector search use the HNSW index on a table of a few thousand rows? Both planner
settings side by side: ``enable_seqscan`` on (PostgreSQL's choice) and off (what
``query.options.ENABLE_SEQSCAN = False`` sets for each search).

    flock /tmp/sbert-bench.lock .venv/bin/python -m benchmarks.seqscan --rows 5000
    python -m benchmarks.seqscan --rows 5000 --storage main   # vectors in the row

The rows are SciFact abstracts loaded as ``benchmarks.profile_search`` loads them (title and
the first 300 characters, their all-MiniLM-L6-v2 vectors, cached under artifacts/bench). For each
setting, twice and alternating: the plan's scan (index or sequential) and the p50 / p99 of
``similar_to(vector)[:10]`` over 100 SciFact claims, then recall@10 of the index against the
sequential scan (exact) on 50 claims.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from benchmarks.common import add_json_option, cpu_line, p50_p99, patched, write_json

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--storage", choices=["external", "main"], default="external")
    add_json_option(parser)
    args = parser.parse_args()

    from benchmarks import profile_search
    from benchmarks.django_setup import article_model

    profile_search.configure(args.rows)
    from django.db import connection
    from django.test.runner import DiscoverRunner

    from django_sbert.serving import encode_query

    Article = article_model()
    DiscoverRunner(verbosity=0).setup_databases()
    profile_search.load_rows(args.rows, args.storage)
    print(cpu_line())
    print(f"{args.rows} rows, vector storage {args.storage}, load {os.getloadavg()[0]:.1f}")
    vectors = [encode_query(q) for q in profile_search.queries()[:150]]

    def planner(setting: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"SET enable_seqscan = {setting}")

    from django_sbert.query import options

    # ENABLE_SEQSCAN True: the library leaves the session's setting, set here, alone.
    runs = []
    with patched(options, ENABLE_SEQSCAN=True):
        for setting in ("on", "off", "on", "off"):
            planner(setting)
            plan = Article.objects.similar_to(vectors[0])[:10].explain()
            scan = "index" if "hnsw" in plan else "sequential"
            times = []
            for vector in vectors[50:150]:
                started = time.perf_counter()
                list(Article.objects.similar_to(vector)[:10])
                times.append((time.perf_counter() - started) * 1000)
            p50, p99 = p50_p99(times)
            print(
                f"enable_seqscan {setting:>3}: {scan:>10} scan, p50 {p50:.2f} ms, p99 {p99:.2f} ms"
            )
            runs.append(
                {
                    "enable_seqscan": setting,
                    "scan": scan,
                    "p50_ms": round(p50, 2),
                    "p99_ms": round(p99, 2),
                }
            )
        planner("off")
        index = [{r.pk for r in Article.objects.similar_to(v)[:10]} for v in vectors[:50]]
        planner("on")
        with connection.cursor() as cursor:
            cursor.execute("SET enable_indexscan = off")
        exact = [{r.pk for r in Article.objects.similar_to(v)[:10]} for v in vectors[:50]]
    recall = statistics.mean(len(a & b) / 10 for a, b in zip(index, exact, strict=True))
    print(f"recall@10 of the index against the sequential scan: {recall:.3f}")
    write_json(
        args.json,
        {"rows": args.rows, "storage": args.storage, "runs": runs, "recall@10": round(recall, 3)},
    )


if __name__ == "__main__":
    main()
