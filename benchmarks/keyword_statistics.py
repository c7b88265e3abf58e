"""BM25 keyword search: what its cost bounds keep of the exact ranking, what keeping its
statistics costs writers, and how it ranks news.

1. **Bounds.** The 5,183 SciFact abstracts (title -> ``title``, abstract -> ``body`` of the test
   app's ``Article``; no vectors: keyword search only), optionally filled up to ``--rows`` with
   abstract-like rows made of ../shared/data's sentences (``benchmarks.hybrid.filler``). For
   the claims of the dev half of ``benchmarks.hybrid``'s split (seeded; nothing from
   ../shared/eval): ``keyword_search(text, match="any")[:10]`` with the default bounds
   (``query.options.KEYWORD_CANDIDATE_ROWS``, ``BM25_RESCORE``) against the exact BM25 top 10
   (every row holding a query word scored exactly), as the share of the exact top 10 kept,
   nDCG@10 of both, and the p50 of each.
2. **Upkeep** (``--upkeep``): rows per second of the write paths on the same table with the
   statistics triggers (django_sbert/keyword/statistics.py) and without them (dropped):
   ``save()`` of new rows in transactions of 100, ``bulk_create`` of 1,000, ``update()`` of
   the body of 1,000 rows, and the embedding write (``update()`` of the vector columns only).
   Each is run ``--repeat`` times, alternating with and without, and the medians compared.
3. **Wikinews** (``--wikinews``): each article's headline as the query, its body the row to
   find (the headline is not in the row), over a seeded half of the 5,767 articles: BM25
   against ts_rank, the rank of a column without statistics (and of releases before 0.2.0).

::

    python -m benchmarks.keyword_statistics [--rows 100000] [--queries N] [--upkeep]
        [--wikinews] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks.common import (
    add_json_option,
    cpu_line,
    load_average,
    patched,
    percentile,
    write_json,
)
from benchmarks.django_setup import article_model, setup_django


def bounds(dev: list, ids: list[str], figures: dict) -> None:
    from benchmarks.hybrid import evaluate
    from django_sbert.query import options

    Article = article_model()

    def run(**constants) -> tuple[list[list[str]], float]:
        """The dev queries' top 10, with query/options.py's constants as given."""
        runs, times = [], []
        with patched(options, **constants):
            list(Article.objects.keyword_search("warm up", match="any")[:10])
            for _, text, _ in dev:
                started = time.perf_counter()
                pks = list(
                    Article.objects.keyword_search(text, match="any")[:10].values_list(
                        "pk", flat=True
                    )
                )
                times.append(1000 * (time.perf_counter() - started))
                runs.append([ids[pk - 1] for pk in pks])
        return runs, percentile(times, 50)

    bounded, bounded_p50 = run()
    exact, exact_p50 = run(KEYWORD_CANDIDATE_ROWS=None, BM25_RESCORE=1_000_000)
    kept = [len(set(b) & set(e)) / len(e) for b, e in zip(bounded, exact, strict=True) if e]
    result = {
        "exact_top10_kept": round(float(np.mean(kept)), 4),
        "ndcg@10_bounded": round(evaluate(bounded, dev)["ndcg@10"], 2),
        "ndcg@10_exact": round(evaluate(exact, dev)["ndcg@10"], 2),
        "p50_ms_bounded": round(bounded_p50, 1),
        "p50_ms_exact": round(exact_p50, 1),
    }
    print(
        f"BM25 top 10 with the default bounds keeps {100 * result['exact_top10_kept']:.1f}% of "
        f"the exact top 10; nDCG@10 {result['ndcg@10_bounded']} (exact "
        f"{result['ndcg@10_exact']}); p50 {result['p50_ms_bounded']} ms (exact "
        f"{result['p50_ms_exact']} ms)",
        flush=True,
    )
    figures["bounds"] = result


def wikinews(figures: dict, seed: int) -> None:
    """Wikinews: each article's headline as the query, its body (without the headline) the
    row to find; BM25 against ts_rank (the statistics removed), ``match="any"``, on a seeded
    half of the articles' headlines (the other half is not looked at)."""
    import json
    import random

    from django.db import connection

    from benchmarks.common import DATA
    from benchmarks.hybrid import evaluate
    from django_sbert.keyword.statistics import rebuild

    Article = article_model()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE testapp_article RESTART IDENTITY CASCADE")
    docs = []
    for path in sorted((DATA / "wikinews").glob("*.jsonl")):
        docs += [json.loads(line) for line in path.open(encoding="utf-8")]
    objs = Article.objects.bulk_create(
        (Article(title="", body=doc["text"]) for doc in docs), batch_size=2000
    )
    ids = {obj.pk: doc["id"] for obj, doc in zip(objs, docs, strict=True)}
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    queries = [
        (docs[i]["id"], docs[i]["title"], {docs[i]["id"]: 1}) for i in order[: len(order) // 2]
    ]
    result = {"articles": len(docs), "queries": len(queries)}
    for rank in ("bm25", "ts_rank"):
        if rank == "ts_rank":  # a column without BM25 statistics ranks by ts_rank
            with connection.cursor() as cursor:
                cursor.execute(
                    "DELETE FROM django_sbert_keyword_total WHERE relation = %s",
                    ["testapp_article.embedding_tsv"],
                )
        runs = []
        for _, text, _ in queries:
            found = Article.objects.keyword_search(text, match="any")[:10]
            runs.append([ids[pk] for pk in found.values_list("pk", flat=True)])
        result[f"ndcg@10_{rank}"] = round(evaluate(runs, queries)["ndcg@10"], 2)
    rebuild()
    print(
        f"Wikinews, {len(queries)} headlines as queries over {len(docs)} article bodies: "
        f"nDCG@10 BM25 {result['ndcg@10_bm25']}, ts_rank {result['ndcg@10_ts_rank']}",
        flush=True,
    )
    figures["wikinews"] = result


def upkeep(repeat: int, figures: dict) -> None:
    from django.db import connection, transaction

    from benchmarks.hybrid import corpus
    from benchmarks.ingest import drop_keyword_triggers
    from django_sbert.keyword.statistics import install

    Article = article_model()
    texts = corpus()[:1000]
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((1000, 384)).astype(np.float32)

    def paths() -> dict[str, float]:
        """Seconds of each write path over 1,000 rows."""
        seconds = {}
        started = time.perf_counter()
        for start in range(0, 1000, 100):
            with transaction.atomic():
                for row in texts[start : start + 100]:
                    Article.objects.create(title=row["title"], body=row["body"])
        seconds["save() x1000, 100 per transaction"] = time.perf_counter() - started
        started = time.perf_counter()
        Article.objects.bulk_create(Article(title=row["title"], body=row["body"]) for row in texts)
        seconds["bulk_create(1000)"] = time.perf_counter() - started
        pks = list(Article.objects.order_by("-pk").values_list("pk", flat=True)[:1000])
        started = time.perf_counter()
        Article.objects.filter(pk__in=pks).update(body="a new body for every row")
        seconds["update(body) of 1000"] = time.perf_counter() - started
        started = time.perf_counter()
        with transaction.atomic():
            for pk, vector in zip(pks, vectors, strict=True):
                Article.objects.filter(pk=pk).update(embedding=vector)
        seconds["embedding writes x1000"] = time.perf_counter() - started
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM testapp_article WHERE id > 5183")
        return seconds

    runs: dict[str, dict[str, list[float]]] = {"with": {}, "without": {}}
    for _ in range(repeat):
        for mode in ("with", "without"):
            if mode == "with":
                install()
            else:
                drop_keyword_triggers()
            for path, value in paths().items():
                runs[mode].setdefault(path, []).append(value)
    install()
    print("\n| write path | rows/s with statistics | rows/s without | cost |")
    print("|---|---|---|---|")
    table = []
    for path in runs["with"]:
        with_s = statistics.median(runs["with"][path])
        without_s = statistics.median(runs["without"][path])
        cost = 1 - without_s / with_s
        print(f"| {path} | {1000 / with_s:.0f} | {1000 / without_s:.0f} | {cost:+.1%} |")
        table.append(
            {
                "path": path,
                "rows_per_s_with": round(1000 / with_s),
                "rows_per_s_without": round(1000 / without_s),
                "cost": round(cost, 3),
            }
        )
    figures["upkeep"] = table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="fill the table up to this")
    parser.add_argument("--upkeep", action="store_true", help="also time the write paths")
    parser.add_argument(
        "--wikinews", action="store_true", help="then headlines as queries over Wikinews"
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--queries", type=int, default=None, help="only the first N dev claims")
    add_json_option(parser)
    args = parser.parse_args()

    print(cpu_line())
    setup_django({"AUTO_EMBED": False})
    from django.db import connection

    from benchmarks.hybrid import corpus, filler_texts, queries_with_qrels, split

    Article = article_model()
    rows = corpus()
    if args.rows and args.rows > len(rows):
        rows = rows + filler_texts(args.rows - len(rows))
    Article.objects.bulk_create(
        (Article(title=row["title"], body=row["body"]) for row in rows), batch_size=5000
    )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE testapp_article")
    ids = [row["id"] for row in rows]
    dev, _ = split(queries_with_qrels(), args.seed, 0.5)
    dev = dev[: args.queries]
    print(f"{len(rows)} rows; {len(dev)} dev claims (seed {args.seed}); load {load_average()}")
    figures: dict = {"rows": len(rows)}
    bounds(dev, ids, figures)
    if args.upkeep:
        upkeep(args.repeat, figures)
    if args.wikinews:
        wikinews(figures, args.seed)
    print(f"load average at the end: {load_average()}")
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
