"""Measuring search quality: ``evaluate()`` (``manage.py sbert_evaluate``) timed on SciFact.

A judgment list of 400 SciFact training claims (the first 400 distinct claims with
judgements, in file order; each judged abstract graded as its qrels grade, 1) over the 5,183
abstracts, loaded into the example project's ``articles.Article`` (``passages=True,
keyword_search=True``: every mode) with all-MiniLM-L6-v2: row vectors (the mean of the
passages, as indexing writes them) and passages (``passages=True``'s split), encoded once and
cached under ``artifacts/bench/`` (shared with ``benchmarks.passages``), loaded with COPY,
both HNSW indexes built.

Then ``evaluate(list)`` with the serving version, all four modes, ``--rounds`` times; printed
per mode: the figures, the seconds, and where they go: encoding the 400 claims (one batched
call, shared by the vector, hybrid and passages modes) against the 400 searches in SQL.

    python -m benchmarks.evaluate [--queries 400] [--rounds 3] [--threads 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from benchmarks.common import add_json_option, cpu_line, load_average, write_json
from benchmarks.hybrid import corpus as scifact_corpus
from benchmarks.hybrid import queries_with_qrels
from benchmarks.passages import (
    MODEL,
    encode_passages,
    example_article_model,
    load_table,
    setup_django,
    source_text,
)


def judgment_list(claims: list[tuple[str, str, dict[str, int]]], pk_of: dict[str, int]) -> Any:
    """The claims as a judgment list over articles.Article.embedding (rows by corpus id)."""
    from django.contrib.contenttypes.models import ContentType

    from django_sbert.models import JudgedQuery, Judgment, JudgmentList

    JudgmentList.objects.filter(name="scifact-train").delete()
    graded = JudgmentList.objects.create(
        name="scifact-train",
        content_type=ContentType.objects.get_for_model(example_article_model()),
        field="embedding",
    )
    for _, text, qrels in claims:
        query = JudgedQuery.objects.create(judgment_list=graded, text=text)
        Judgment.objects.bulk_create(
            Judgment(query=query, object_pk=str(pk_of[doc]), grade=grade)
            for doc, grade in qrels.items()
            if doc in pk_of
        )
    return graded


def distinct_claims(n: int) -> list[tuple[str, str, dict[str, int]]]:
    """The first ``n`` distinct training claims with judgements; a claim that appears under
    several ids (a few do) gets the judgements of all of them."""
    merged: dict[str, tuple[str, str, dict[str, int]]] = {}
    for qid, text, qrels in queries_with_qrels():
        if text in merged:
            for doc, grade in qrels.items():
                merged[text][2][doc] = max(grade, merged[text][2].get(doc, 0))
        elif len(merged) < n:
            merged[text] = (qid, text, dict(qrels))
    return list(merged.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--ef-search", type=int, default=100)
    add_json_option(parser)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(cpu_line())
    print(f"{args.threads} torch thread(s); load average {load_average()} at start")
    setup_django(args.threads, args.ef_search)

    from django_sbert.evaluation.run import evaluate
    from django_sbert.passages import PassageConfig, passage_limit
    from django_sbert.serving import get_encoder

    encoder = get_encoder("default")
    sci = scifact_corpus()
    rows = [{"title": r["title"], "body": r["body"], "url": f"scifact:{r['id']}"} for r in sci]
    texts = [source_text(r) for r in rows]
    config = PassageConfig()
    window = encoder.tokenizer.content_width()
    size = min(config.max_tokens or window, window)
    split = {
        "max_tokens": size,
        "overlap": config.overlap,
        "max_passages": passage_limit(config, "default"),
    }
    passages = encode_passages(f"scifact-passages-{size}", texts, encoder, **split)
    builds = load_table(rows, passages)
    pk_of = {r["id"]: i + 1 for i, r in enumerate(sci)}
    claims = distinct_claims(args.queries)
    graded = judgment_list(claims, pk_of)
    print(
        f"SciFact: {len(rows)} abstracts ({len(passages.vectors)} passages of at most {size} "
        f"tokens), {len(claims)} training claims; {MODEL}; {builds}"
    )

    evaluate(graded, modes=["vector"], store=False)  # warm: model loaded, connection open
    per_mode: dict[str, dict[str, list[float]]] = {}
    figures: dict[str, dict[str, Any]] = {}
    totals = []
    for _ in range(args.rounds):
        started = time.perf_counter()
        found = evaluate(graded, store=False)
        totals.append(time.perf_counter() - started)
        for e in found:
            timing = per_mode.setdefault(e.mode, {"seconds": [], "encode": [], "sql": []})
            timing["seconds"].append(e.seconds)
            timing["encode"].append(e.metrics["timing"].get(f"{e.mode}_encode_queries", 0.0))
            timing["sql"].append(e.metrics["timing"][f"{e.mode}_search"])
            figures[e.mode] = {
                key: e.metrics.get(key)
                for key in ("ndcg@10", "recall@10", "recall@100", "mrr@10", "no_relevant@10")
            }
            figures[e.mode]["queries"] = e.metrics["queries"]
            figures[e.mode]["min_similarity"] = (e.metrics.get("threshold") or {}).get(
                "min_similarity"
            )
    results = []
    print(
        f"\nevaluate(): {args.queries} claims, all four modes, median of {args.rounds} rounds: "
        f"{statistics.median(totals):.1f} s in all; per mode: its seconds, of which encoding "
        "the claims (one batched call, shared by the modes that need vectors) and SQL"
    )
    head = "mode       nDCG@10  R@10   R@100  MRR@10  none@10  min_sim   s  encode  SQL"
    print(head)
    for mode, timing in per_mode.items():
        f = figures[mode]
        row = {
            "mode": mode,
            **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in f.items()},
            "seconds": round(statistics.median(timing["seconds"]), 2),
            "encode_s": round(statistics.median(timing["encode"]), 2),
            "sql_s": round(statistics.median(timing["sql"]), 2),
        }
        results.append(row)
        threshold = f["min_similarity"]
        print(
            f"{mode:9} {100 * f['ndcg@10']:8.2f} {100 * f['recall@10']:6.2f} "
            f"{100 * (f['recall@100'] or 0):6.2f} {100 * f['mrr@10']:7.2f} "
            f"{100 * f['no_relevant@10']:7.2f} "
            f"{'-' if threshold is None else f'{threshold:.3f}':>8} {row['seconds']:5.1f} "
            f"{row['encode_s']:6.1f} {row['sql_s']:5.1f}"
        )
    write_json(args.json, {"total_s": round(statistics.median(totals), 2), "modes": results})


if __name__ == "__main__":
    main()
