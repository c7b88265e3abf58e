"""Search-as-you-type: ``Article.objects.suggest(text_so_far, k=5)`` per keystroke.

Latency: SciFact training claims are "typed" one character at a time, and every prefix from
the first character to the whole claim is one timed ``suggest()`` call (end to end: the words
split, the prefix match in PostgreSQL, the text encoded by all-MiniLM-L6-v2 when it is long
enough, the HNSW search, the fusion, the rows fetched). Every prefix is a text the process has
not seen, so the query cache never helps. A browser debounces typing (the script waits 150 ms)
and sends fewer requests than this: every keystroke is the most a visitor can ask for.
Reported: p50 / p99 over all keystrokes, and separately over the short texts answered by the
prefix match alone and over the longer ones that also encode.

* 5,000 rows: the first 5,000 SciFact abstracts (title -> ``title``, abstract -> ``body``),
  vectors encoded once and cached (``benchmarks.hybrid``'s corpus and cache).
* 100,000 rows: ``benchmarks.search``'s corpus, distinct sentences of Wikinews and SciFact
  (``title``; no body), vectors encoded once and cached (``--prepare-only`` to encode only).

Quality (``--quality``, 5,000 rows only): for the claims of the 5,000 abstracts, at set prefix
lengths, how often an abstract the claim cites is among the 5 suggestions: prefix match
alone, vector search alone, and their fusion, so the length from which the vector side helps
(``query.suggest.VECTOR_MIN_CHARS``) is measured, not guessed.

    python -m benchmarks.suggest                      # 5,000 and 100,000 rows
    python -m benchmarks.suggest --rows 5000 --quality --claims 30 --repeats 3
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import time
from collections import defaultdict

import numpy as np

from benchmarks.common import add_json_option, cpu_line, load_average, percentile, write_json

K = 5
QUALITY_LENGTHS = (2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 1000)


def load(rows: int) -> tuple[str, float]:
    """Fill testapp_article with ``rows`` rows; (what they are, HNSW build seconds)."""
    if rows <= 5183:
        from benchmarks import hybrid

        corpus = hybrid.corpus()[:rows]
        texts = [hybrid.embedding_text(row) for row in hybrid.corpus()]
        vectors = hybrid.encode_cached(texts, len(texts), 1)[:rows]
        build = hybrid.load_corpus(corpus, vectors)
        return f"{rows} SciFact abstracts (title and abstract)", build
    from benchmarks import search

    texts = search.corpus_sentences()
    vectors = search.encode_cached(texts, rows, 1)
    build = search.load_rows(vectors[:rows], texts[:rows])
    return f"{rows} distinct Wikinews and SciFact sentences (title only)", build


def prepare(rows: list[int], threads: int) -> None:
    """Encode and cache the corpora (no Django, no database) with ``threads`` torch threads."""
    from benchmarks import hybrid, search

    if any(n <= 5183 for n in rows):
        texts = [hybrid.embedding_text(row) for row in hybrid.corpus()]
        hybrid.encode_cached(texts, len(texts), threads)
    largest = max(rows)
    if largest > 5183:
        search.encode_cached(search.corpus_sentences(), largest, threads)


def typing_latency(claims: list[str]) -> dict[str, list[float]]:
    """Milliseconds of each keystroke's suggest(), split by whether the text was encoded."""
    from benchmarks.django_setup import article_model
    from django_sbert.query.suggest import VECTOR_MIN_CHARS
    from django_sbert.serving import clear_query_cache

    Article = article_model()
    vector_from = VECTOR_MIN_CHARS
    clear_query_cache()
    times: dict[str, list[float]] = defaultdict(list)
    for claim in claims:
        for n in range(1, len(claim) + 1):
            text = claim[:n]
            t0 = time.perf_counter()
            Article.objects.suggest(text, k=K)
            ms = (time.perf_counter() - t0) * 1000
            times["all"].append(ms)
            typed = len(" ".join(text.split()))
            times["prefix only" if typed < vector_from else "prefix + vector"].append(ms)
    return times


def quality(claims: list[tuple[str, set[int]]]) -> list[dict]:
    """Success@5 per prefix length: prefix match, vector search, their fusion."""
    from benchmarks.django_setup import article_model
    from django_sbert.conf import sbert_settings
    from django_sbert.query.suggest import CANDIDATES, fuse, prefix_matches

    Article = article_model()
    field = Article._meta.get_field("embedding")
    rrf_k = float(sbert_settings.SEARCH["FUSION"]["RRF_K"])
    n = CANDIDATES
    hits: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for claim, relevant in claims:
        for length in QUALITY_LENGTHS:
            text = " ".join(claim[:length].split())
            if length > len(claim) and length != QUALITY_LENGTHS[-1]:
                continue
            keyword = prefix_matches(Article.objects.all(), field, text, n)
            vector = list(Article.objects.similar_to(text, k=n).values_list("pk", flat=True))
            fused = [pk for pk, *_ in fuse(keyword, vector, rrf_k)]
            for name, ranking in (("prefix", keyword), ("vector", vector), ("fused", fused)):
                hits[length][name].append(float(bool(set(ranking[:K]) & relevant)))
    return [
        {
            "chars": "whole claim" if length == QUALITY_LENGTHS[-1] else length,
            "claims": len(v["fused"]),
        }
        | {f"{name} S@{K}": round(100 * float(np.mean(v[name])), 1) for name in v}
        for length, v in hits.items()
    ]


def scifact_claims_with_docs(rows: int) -> list[tuple[str, set[int]]]:
    """(claim, pks of the abstracts it cites among the first ``rows``), for claims citing one."""
    from benchmarks import hybrid

    pk = {row["id"]: i + 1 for i, row in enumerate(hybrid.corpus()[:rows])}
    out = []
    for _, text, qrels in hybrid.queries_with_qrels():
        cited = {pk[doc] for doc, rel in qrels.items() if rel > 0 and doc in pk}
        if cited:
            out.append((text, cited))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[5_000, 100_000])
    parser.add_argument("--claims", type=int, default=30, help="claims typed per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per size (medians reported)")
    parser.add_argument("--quality", action="store_true", help="success@5 by prefix length")
    parser.add_argument("--quality-claims", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (SBERT THREADS)")
    parser.add_argument("--prepare-only", action="store_true", help="encode the corpora and stop")
    add_json_option(parser)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(cpu_line())
    prepare(args.rows, args.threads)
    if args.prepare_only:
        return

    from benchmarks.data import scifact_claims
    from benchmarks.search import setup_django

    setup_django(args.threads, 1, None, None, None)  # QUERY_THREADS 1, the default path
    from benchmarks.django_setup import article_model
    from django_sbert.serving.warmup import warm

    search = importlib.import_module("django_sbert.query.suggest")  # the module's constants
    claims = scifact_claims(args.claims * args.repeats)
    print(
        f"typing: {args.claims} SciFact training claims per run, every prefix one suggest(k={K}) "
        f"({sum(len(c) for c in claims[: args.claims])} keystrokes in the first run); "
        f"MIN_CHARS {search.MIN_CHARS}, VECTOR_MIN_CHARS {search.VECTOR_MIN_CHARS}, "
        f"CANDIDATES {search.CANDIDATES} (query/suggest.py); {os.cpu_count()} CPUs, load average "
        f"{load_average()} at start"
    )
    results = []
    for rows in sorted(args.rows):
        what, build = load(rows)
        warm(["default"], role="query")
        Article = article_model()
        for text in ("warm up", "warm up the connection"):
            Article.objects.suggest(text)
        runs = []
        for run in range(args.repeats):
            times = typing_latency(claims[run * args.claims : (run + 1) * args.claims])
            runs.append(
                {
                    f"{name} {stat}": round(percentile(values, q), 2)
                    for name, values in times.items()
                    for stat, q in (("p50", 50), ("p99", 99))
                }
                | {"keystrokes": len(times["all"])}
            )
            print(f"  {rows} rows, run {run + 1}: {runs[-1]}")
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        result = {"rows": rows, "corpus": what, "index_build_s": round(build, 1), **median}
        if args.quality and rows <= 5183:
            claims_docs = scifact_claims_with_docs(rows)[: args.quality_claims]
            result["quality"] = quality(claims_docs)
            print(f"  success@{K} by prefix length ({len(claims_docs)} claims citing these rows):")
            for row in result["quality"]:
                print("   ", row)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "quality"}))
    print(f"load average at the end: {load_average()}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
