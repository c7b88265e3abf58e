"""Keyword search quality against the keyword column's statistics target, on SciFact.

``keyword_search(text, match="any")`` weighs each word by how rare it is, from the lexeme
frequencies ANALYZE keeps for the tsvector column: about ten times the column's statistics
target of them (``SBERT["SEARCH"]["KEYWORD_STATISTICS"]``, set after migrate). A word outside
them gets one shared weight. This loads the 5,183 SciFact abstracts into the test app's
``Article`` (title -> ``title``, abstract -> ``body``; no vectors: keyword search only),
then for each target sets it, runs ANALYZE and reports nDCG@10 / Recall@10 over the dev
half of ``benchmarks.admin_finetune``'s split of the training claims (seeded; nothing from
../shared/eval), with the words counted, ANALYZE's time and the p50 of one
``keyword_search(text, match="any")[:10]`` (statistics read, GIN index vacuumed).

``--equal-weights`` also ranks with the title weighed as the body (rank multiplier 0.4 for
both, what ``keyword_weights={"title": "B", "body": "B"}`` gives) at the last target.

    python -m benchmarks.keyword_statistics [--targets 100 1000 10000] [--json PATH]
"""

from __future__ import annotations

import argparse
import time

from benchmarks.common import add_json_option, cpu_line, percentile, write_json
from benchmarks.django_setup import article_model, setup_django


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--dev-share", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--equal-weights", action="store_true")
    add_json_option(parser)
    args = parser.parse_args()

    print(cpu_line())
    setup_django({"AUTO_EMBED": False})
    from django.db import connection

    from benchmarks.admin_finetune import load
    from django_sbert import fulltext
    from django_sbert.encoder.evaluation import ranking_metrics

    Article = article_model()
    data = load(0, args.seed, args.dev_share, 0.0)
    objs = Article.objects.bulk_create(
        Article(title=title[:300], body=text) for title, text in data["corpus"].values()
    )
    doc_of = {obj.pk: did for did, obj in zip(data["corpus"], objs, strict=True)}
    dev = data["split"]["dev"]
    print(f"SciFact: {len(objs)} abstracts, {len(dev)} dev claims (seed {args.seed})")

    figures: list[dict] = []

    def measure(label: str) -> None:
        rankings, times = {}, []
        for qid in dev:
            started = time.perf_counter()
            qs = Article.objects.keyword_search(data["queries"][qid], match="any", k=10)
            pks = list(qs.values_list("pk", flat=True))
            times.append(1000 * (time.perf_counter() - started))
            rankings[qid] = [doc_of[pk] for pk in pks]
        scores = ranking_metrics(rankings, data["relevant"], 10)
        ndcg, recall, p50 = (
            100 * scores["ndcg@10"],
            100 * scores["recall@10"],
            percentile(times, 50),
        )
        print(
            f"{label}: keyword nDCG@10 {ndcg:.2f}, Recall@10 {recall:.2f}, p50 {p50:.2f} ms",
            flush=True,
        )
        figures.append(
            {
                "run": label,
                "ndcg@10": round(ndcg, 2),
                "recall@10": round(recall, 2),
                "p50_ms": round(p50, 2),
            }
        )

    for target in args.targets:
        with connection.cursor() as cursor:
            cursor.execute(
                "ALTER TABLE testapp_article ALTER COLUMN embedding_tsv "
                f"SET STATISTICS {int(target)}"
            )
            started = time.perf_counter()
            cursor.execute("ANALYZE testapp_article")
            seconds = time.perf_counter() - started
            cursor.execute("VACUUM testapp_article")  # GIN's pending list, as autovacuum would
        fulltext.clear_statistics_cache()
        list(Article.objects.keyword_search("warm up the statistics", match="any")[:10])
        words = len(fulltext.column_statistics(connection, "testapp_article", "embedding_tsv")[0])
        measure(f"statistics target {target} ({words} words counted, ANALYZE {seconds:.2f} s)")
    if args.equal_weights:
        # Weight A's multiplier set to B's: what keyword_weights={"title": "B", ...} ranks by.
        fulltext.RANK_WEIGHTS = (*fulltext.RANK_WEIGHTS[:3], fulltext.RANK_WEIGHTS[2])
        measure(f"statistics target {args.targets[-1]}, title weighed as the body")
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
