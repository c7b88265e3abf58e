"""Hybrid search on SciFact: nDCG@10 and Recall@10 of vector, keyword and hybrid modes.

The corpus is the 5,183 SciFact abstracts (title -> ``title``, abstract -> ``body`` of the test
app's Article, whose EmbeddingField has ``keyword_search=True``), encoded once with
all-MiniLM-L6-v2 and cached under ``artifacts/bench/`` (the vectors are written with COPY, so no
worker runs). Queries are the SciFact training claims, split by a seeded shuffle into a dev half
and a held-out half. Fusion settings (RRF k, keyword weight, candidates per side, keyword match)
are chosen on the dev half only; the held-out half is reported with the chosen settings.

Latency is the p50 over the queries of the timed half of ``Article.objects.<mode>(text)[:10]``:
end to end with an uncached query encoding, and search only (the query vector already cached).

    python -m benchmarks.hybrid                 # encode (first run), tune, report
    python -m benchmarks.hybrid --prepare-only  # just encode and cache the corpus
    python -m benchmarks.hybrid --fusion-families  # RRF against linear, then stop
    python -m benchmarks.hybrid --plan-parts 50  # where PostgreSQL's time goes, then stop

``--fusion-families`` compares ``hybrid_search()``'s two kinds of fusion on the same candidate
lists, over the grid a fine-tuning run searches (``finetuning.hybrid``): RRF, and linear fusion
of normalised scores (Bruch, Gai and Ingber 2023), each chosen on the dev half and reported on
the held-out half, then the other way round. Each choice then runs once more in SQL, through
``hybrid_search()``, on the other half: the same figure, or the Python twin is wrong.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import time
from collections import defaultdict

import numpy as np

from benchmarks.common import (
    DATA,
    add_json_option,
    cpu_line,
    load_average,
    percentile,
    write_json,
)
from benchmarks.django_setup import article_model
from benchmarks.search import encode_cached, setup_django
from django_sbert.encoder.paths import QUERY_RUNTIMES

SCIFACT = DATA / "scifact"
CUTOFF = 10
MAX_DFS = (0.05, 0.1, 0.2, 0.5)  # keyword_search(match="any", max_df=...) tried on dev


# -- data -------------------------------------------------------------------------------------


def corpus() -> list[dict[str, str]]:
    """SciFact abstracts in file order: ``{"id", "title", "body"}``."""
    rows = []
    for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8"):
        doc = json.loads(line)
        rows.append({"id": doc["_id"], "title": doc["title"][:300], "body": doc["text"]})
    return rows


def filler(rows: int, vectors: np.ndarray, seed: int = 45) -> tuple[list[dict], np.ndarray]:
    """``rows`` more rows for ``--rows``: ``filler_texts`` with vectors that mix two related
    real SciFact vectors (``_scale_data``'s fillers: ``normalize(w * v[a] + (1 - w) * v[b])``,
    ``b`` one of ``a``'s 20 nearest)."""
    from benchmarks._scale_data import nearest_real

    rng = np.random.default_rng(seed)
    near = nearest_real(vectors, 20)
    a = np.arange(rows) % len(vectors)
    b = near[a, rng.integers(0, 20, rows)]
    w = rng.uniform(0.25, 0.75, (rows, 1)).astype(np.float32)
    mixed = w * vectors[a] + (1 - w) * vectors[b]
    mixed = (mixed / np.linalg.norm(mixed, axis=1, keepdims=True)).astype(np.float32)
    return filler_texts(rows, seed), mixed


def filler_texts(rows: int, seed: int = 45) -> list[dict]:
    """Abstract-like rows made of the sentences of ../shared/data (benchmarks.data.
    corpus_texts: Wikinews and SciFact titles and sentences), a title and six to ten sentences
    each, drawn with a fixed seed. Never judged relevant: they only make the table bigger and
    the words commoner, as a bigger site's rows would."""
    from benchmarks.data import corpus_texts

    sentences = [t for t in dict.fromkeys(corpus_texts(DATA)) if 25 <= len(t) <= 400]
    rng = np.random.default_rng(seed)
    out = []
    for i in range(rows):
        picked = rng.integers(0, len(sentences), int(rng.integers(7, 12)))
        out.append(
            {
                "id": f"filler-{i}",
                "title": sentences[picked[0]][:300],
                "body": " ".join(sentences[j] for j in picked[1:]),
            }
        )
    return out


def embedding_text(row: dict[str, str]) -> str:
    """What ``EmbeddingField(source=("title", "body"))`` encodes: the fields joined by a newline."""
    return f"{row['title']}\n{row['body']}"


def queries_with_qrels() -> list[tuple[str, str, dict[str, int]]]:
    """(query id, claim, {corpus id: relevance}) for every training claim that has judgements."""
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for line in (SCIFACT / "qrels-train.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, doc, score = line.split("\t")
        qrels[qid][doc] = int(score)
    out = []
    for line in (SCIFACT / "queries-train.jsonl").open(encoding="utf-8"):
        query = json.loads(line)
        if query["_id"] in qrels:
            out.append((query["_id"], query["text"], qrels[query["_id"]]))
    return out


def split(queries: list, seed: int, dev_fraction: float) -> tuple[list, list]:
    """A seeded shuffle of the training claims into (dev, held-out)."""
    order = list(range(len(queries)))
    random.Random(seed).shuffle(order)
    cut = int(len(order) * dev_fraction)
    return [queries[i] for i in order[:cut]], [queries[i] for i in order[cut:]]


# -- metrics ----------------------------------------------------------------------------------


def ndcg_at(ranked: list[str], relevant: dict[str, int], cutoff: int = CUTOFF) -> float:
    dcg = sum(
        (2 ** relevant.get(doc, 0) - 1) / np.log2(i + 2) for i, doc in enumerate(ranked[:cutoff])
    )
    ideal = sorted(relevant.values(), reverse=True)[:cutoff]
    idcg = sum((2**rel - 1) / np.log2(i + 2) for i, rel in enumerate(ideal))
    return float(dcg / idcg) if idcg else 0.0


def recall_at(ranked: list[str], relevant: dict[str, int], cutoff: int = CUTOFF) -> float:
    hits = {doc for doc in ranked[:cutoff] if relevant.get(doc, 0) > 0}
    return len(hits) / sum(1 for rel in relevant.values() if rel > 0)


def evaluate(runs: list[list[str]], queries: list) -> dict[str, float]:
    ndcg = [ndcg_at(run, rel) for run, (_, _, rel) in zip(runs, queries, strict=True)]
    recall = [recall_at(run, rel) for run, (_, _, rel) in zip(runs, queries, strict=True)]
    return {"ndcg@10": 100 * float(np.mean(ndcg)), "recall@10": 100 * float(np.mean(recall))}


# -- database ---------------------------------------------------------------------------------


def load_corpus(
    rows: list[dict[str, str]], vectors: np.ndarray, storage: str = "external"
) -> float:
    """Replace testapp_article with the corpus (COPY; PostgreSQL generates embedding_tsv), then
    build the HNSW index; return the index build time. Article pk i + 1 is rows[i].
    ``storage``: the vector column's (``external``: pgvector's default, out of line past 2 kB;
    ``main``: in the row, as ``django_sbert.operations.SetVectorStorage`` sets it)."""
    from django.db import connection

    from django_sbert.serving import encoder_version

    version = encoder_version()  # searches by text compare with rows of the serving version
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS article_embedding_hnsw")
        cursor.execute("TRUNCATE testapp_article RESTART IDENTITY CASCADE")
        cursor.execute(f"ALTER TABLE testapp_article ALTER COLUMN embedding SET STORAGE {storage}")
        with cursor.cursor.copy(
            "COPY testapp_article (id, title, body, category, published, embedding, "
            "embedding_version) FROM STDIN"
        ) as copy:
            for i, (row, vector) in enumerate(zip(rows, vectors, strict=True)):
                literal = "[" + ",".join(map(repr, vector.tolist())) + "]"
                copy.write_row(
                    (i + 1, row["title"], row["body"], "scifact", True, literal, version)
                )
        cursor.execute("SET maintenance_work_mem = '512MB'")
        started = time.perf_counter()
        cursor.execute(
            "CREATE INDEX article_embedding_hnsw ON testapp_article "
            "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
        )
        build = time.perf_counter() - started
        cursor.execute("VACUUM ANALYZE testapp_article")
    return build


def run_lists(queries: list, depth: int) -> dict[str, list[list[int]]]:
    """Per query, the pks of the vector top-``depth`` and of each keyword variant's."""
    Article = article_model()

    out: dict[str, list[list[int]]] = defaultdict(list)
    for _, text, _ in queries:
        vector = Article.objects.similar_to(text, k=depth)
        out["vector"].append(list(vector.values_list("pk", flat=True)))
        for max_df in MAX_DFS:
            keyword = Article.objects.keyword_search(text, k=depth, match="any", max_df=max_df)
            out[f"any/{max_df}"].append(list(keyword.values_list("pk", flat=True)))
        keyword = Article.objects.keyword_search(text, k=depth, match="all")
        out["all/None"].append(list(keyword.values_list("pk", flat=True)))
    return out


def fuse(vector: list[int], keyword: list[int], rrf_k: float, wk: float, n: int) -> list[int]:
    """hybrid_search()'s ranking, in Python: weight / (rrf_k + rank) summed, ties by pk."""
    scores: dict[int, float] = defaultdict(float)
    for rank, pk in enumerate(vector[:n], start=1):
        scores[pk] += 1.0 / (rrf_k + rank)
    for rank, pk in enumerate(keyword[:n], start=1):
        scores[pk] += wk / (rrf_k + rank)
    return sorted(scores, key=lambda pk: (-scores[pk], pk))[:CUTOFF]


def grid_options(point: dict) -> dict:
    """``hybrid_search()``'s options for a point of ``tune()``'s grid: RRF with the vector
    side's weight 1, as ``fuse()`` ranks (the settings' method and weights may differ)."""
    from django_sbert.query import FusionConfig, KeywordConfig

    fusion = FusionConfig(
        method="rrf",
        rrf_k=point["rrf_k"],
        candidates=point["candidates"],
        vector_weight=1.0,
        keyword_weight=point["keyword_weight"],
    )
    keyword = KeywordConfig(match=point["match"], max_df=point["max_df"])
    return {"fusion": fusion, "keyword": keyword}


def tune(lists: dict[str, list[list[int]]], dev: list, ids: list[str]) -> list[dict]:
    """Every grid point's dev nDCG@10, best first (the Python twin of the SQL fusion)."""
    sides = [("any", max_df) for max_df in MAX_DFS] + [("all", None)]
    grid = itertools.product(
        sides, (1, 5, 10, 20, 40, 60, 100), (0.2, 0.3, 0.5, 0.7, 1.0, 1.5), (20, 50, 100)
    )
    results = []
    for (match, max_df), rrf_k, wk, n in grid:
        keyword = lists[f"{match}/{max_df}"]
        runs = [
            [ids[pk - 1] for pk in fuse(v, kw, rrf_k, wk, n)]
            for v, kw in zip(lists["vector"], keyword, strict=True)
        ]
        settings = {"match": match, "max_df": max_df, "rrf_k": rrf_k, "keyword_weight": wk}
        results.append({**settings, "candidates": n, **evaluate(runs, dev)})
    return sorted(results, key=lambda r: -r["ndcg@10"])


def scored_lists(queries: list, depth: int) -> tuple[list, list]:
    """Per query, the vector top-``depth`` as (pk, cosine) and the keyword top-``depth`` as
    (pk, keyword_score), as ``hybrid_search()`` with the defaults takes its candidates."""
    from django_sbert.conf import SEARCH_DEFAULTS

    Article = article_model()

    match, max_df = SEARCH_DEFAULTS["KEYWORD"]["MATCH"], SEARCH_DEFAULTS["KEYWORD"]["MAX_DF"]
    vector, keyword = [], []
    for _, text, _ in queries:
        found = Article.objects.similar_to(text, k=depth)
        vector.append(list(found.values_list("pk", "similarity")))
        words = Article.objects.keyword_search(text, k=depth, match=match, max_df=max_df)
        keyword.append(list(words.values_list("pk", "keyword_score")))
    return vector, keyword


def compare_fusion_families(dev: list, held: list, ids: list[str]) -> None:
    """RRF against linear fusion, each over the grid a fine-tuning run searches, chosen on one
    half and reported on the other (in Python, then in SQL)."""
    from django_sbert.finetuning import hybrid
    from django_sbert.serving import FUSIONS

    # Options as sorted item tuples: hashable, so the scores can be keyed by them.
    grid = [tuple(sorted(option.items())) for option in hybrid.fusion_grid(hybrid.site_fusion())]
    families = {
        kind: [options for options in grid if dict(options)["fusion"] == kind] for kind in FUSIONS
    }
    started = time.perf_counter()
    halves = {"dev": (dev, scored_lists(dev, 100)), "held-out": (held, scored_lists(held, 100))}
    print(f"candidate lists in {time.perf_counter() - started:.0f} s")

    def ndcg(half: str, options: tuple) -> float:
        queries, (vector, keyword) = halves[half]
        runs = [
            [ids[pk - 1] for pk in hybrid.fuse(v, k, **dict(options))[:CUTOFF]]
            for v, k in zip(vector, keyword, strict=True)
        ]
        return evaluate(runs, queries)["ndcg@10"]

    for half in halves:
        queries, (vector, keyword) = halves[half]
        for side, lists in (("vector", vector), ("keyword", keyword)):
            runs = [[ids[pk - 1] for pk, _ in found[:CUTOFF]] for found in lists]
            print(f"{half} {side} alone: nDCG@10 {evaluate(runs, queries)['ndcg@10']:.2f}")
    print(
        "\n| fusion | chosen on | settings | nDCG@10 there | nDCG@10 on the other half "
        "| the same in SQL |"
    )
    print("|---|---|---|---|---|---|")
    for name, options in families.items():
        for chosen_on, other in (("dev", "held-out"), ("held-out", "dev")):
            scores = {params: ndcg(chosen_on, params) for params in options}
            best = max(options, key=lambda params: scores[params])  # first of equals: grid order
            chosen = dict(best)
            sql = evaluate(
                search_runs(halves[other][0], "hybrid_search", ids, **chosen),
                halves[other][0],
            )["ndcg@10"]
            shown = {k: v for k, v in chosen.items() if name == "rrf" or k != "rrf_k"}
            print(
                f"| {name} | {chosen_on} | {shown} | {scores[best]:.2f} | "
                f"{ndcg(other, best):.2f} | {sql:.2f} |"
            )


def search_runs(queries: list, mode: str, ids: list[str], **options) -> list[list[str]]:
    Article = article_model()

    runs = []
    for _, text, _ in queries:
        qs = getattr(Article.objects, mode)(text, **options)[:CUTOFF]
        runs.append([ids[pk - 1] for pk in qs.values_list("pk", flat=True)])
    return runs


def latency(queries: list, mode: str, **options) -> dict[str, float]:
    """p50 (and p99) of ``mode(text)[:10]`` fetched as instances: uncached encoding, and
    search only."""
    from django_sbert.serving import clear_query_cache

    Article = article_model()

    total, search_only = [], []
    for _, text, _ in queries:
        clear_query_cache()
        started = time.perf_counter()
        list(getattr(Article.objects, mode)(text, **options)[:CUTOFF])
        total.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()  # the query vector is cached now
        list(getattr(Article.objects, mode)(text, **options)[:CUTOFF])
        search_only.append((time.perf_counter() - started) * 1000)
    return {
        "p50_ms": round(percentile(total, 50), 1),
        "p99_ms": round(percentile(total, 99), 1),
        "search_p50_ms": round(percentile(search_only, 50), 1),
    }


def latency_runs(queries: list, mode: str, args: argparse.Namespace, **options) -> dict:
    """``latency()`` ``--latency-runs`` times, each run's figures under its number."""
    figures: dict[str, float] = {}
    for run in range(args.latency_runs):
        for key, value in latency(queries, mode, **options).items():
            figures[f"{key} run {run + 1}"] = value
    return figures


def plan_summary(text: str, **options) -> str:
    """Which indexes the hybrid query's plan uses, and PostgreSQL's own execution time."""
    Article = article_model()

    plan = Article.objects.hybrid_search(text, **options)[:CUTOFF].explain(analyze=True)
    indexes = sorted(
        set(re.findall(r"(?:Index|Bitmap Index) Scan (?:Backward )?(?:using|on) (\w+)", plan))
    )
    executed = re.search(r"Execution Time: ([\d.]+) ms", plan)
    return (
        f"indexes used: {', '.join(indexes)}; execution {executed.group(1) if executed else '?'} ms"
    )


# One plan node's times: "actual time=START..END rows=N loops=L" (rows "N.00" from PostgreSQL 18).
_NODE_TIMES = re.compile(r"actual time=[\d.]+\.\.([\d.]+) rows=[\d.]+ loops=(\d+)")


def _node_ms(line: str) -> float:
    """A plan node's time over all its loops (its end time, per loop, times the loops)."""
    found = _NODE_TIMES.search(line)
    return float(found.group(1)) * int(found.group(2)) if found else 0.0


def plan_parts(plan: str) -> dict[str, float]:
    """PostgreSQL's own time for each part of a hybrid search's plan (EXPLAIN ANALYZE, the
    keyword side inside): the keyword candidates (one GIN scan per word and their quick
    score: the sub-plan over ``sbert_word``), the exact BM25 of the best of them (the
    sub-plan over ``sbert_doc``, once per row), the HNSW scan, planning and execution."""
    lines = plan.splitlines()
    parts = {"candidates_ms": 0.0, "exact_bm25_ms": 0.0, "rows_rescored": 0, "hnsw_ms": 0.0}
    for i, line in enumerate(lines):
        header = line.strip()
        if "Index Scan using" in line and "hnsw" in line:
            parts["hnsw_ms"] += _node_ms(line)
        if not re.fullmatch(r"(InitPlan|SubPlan) \d+", header):
            continue
        indent = len(line) - len(line.lstrip())
        block = []  # the sub-plan's nodes: the lines below it, indented further
        for below in lines[i + 1 :]:
            if len(below) - len(below.lstrip()) <= indent:
                break
            block.append(below)
        text = "\n".join(block)
        if header.startswith("InitPlan") and "sbert_word" in text:
            parts["candidates_ms"] += _node_ms(block[0])
        elif header.startswith("SubPlan") and "Subquery Scan on sbert_doc" in block[0]:
            parts["exact_bm25_ms"] += _node_ms(block[0])
            parts["rows_rescored"] += int(_NODE_TIMES.search(block[0]).group(2))
    for name in ("Planning", "Execution"):
        found = re.search(rf"{name} Time: ([\d.]+) ms", plan)
        parts[f"{name.lower()}_ms"] = float(found.group(1)) if found else 0.0
    return parts


def report_plan_parts(queries: list, count: int) -> None:
    """``plan_parts()`` of the default hybrid search over ``count`` claims: each part's median
    and share of the execution."""
    Article = article_model()

    list(Article.objects.hybrid_search("warm up the encoder and the connection"))
    measured = []
    for _, text, _ in queries[:count]:
        list(Article.objects.hybrid_search(text)[:CUTOFF])  # the vector cached, plans warm
        plan = Article.objects.hybrid_search(text)[:CUTOFF].explain(analyze=True)
        measured.append(plan_parts(plan))
    medians = {key: float(np.median([m[key] for m in measured])) for key in measured[0]}
    execution = medians["execution_ms"] or 1.0
    print(
        "hybrid with the defaults, PostgreSQL's own time (EXPLAIN ANALYZE), median of "
        f"{len(measured)} held-out claims:"
    )
    for key, value in medians.items():
        share = ""
        if key.endswith("_ms") and key not in ("planning_ms", "execution_ms"):
            share = f" ({100 * value / execution:.0f}% of the execution)"
        print(f"  {key}: {value:.2f}{share}")


def report_defaults(dev: list, held: list, ids: list[str], args: argparse.Namespace) -> None:
    """Quality and latency of each mode with the library's defaults (no tuning): ``--rows``."""
    Article = article_model()

    list(Article.objects.hybrid_search("warm up the encoder and the connection"))
    modes = {
        "vector": ("similar_to", {}),
        "keyword (BM25, any word)": ("keyword_search", {"match": "any"}),
        "hybrid (defaults)": ("hybrid_search", {}),
    }
    table = []
    for name, (method, options) in modes.items():
        result = {"mode": name}
        for split_name, split_queries in (("dev", dev), ("held-out", held)):
            scores = evaluate(search_runs(split_queries, method, ids, **options), split_queries)
            result[f"{split_name} nDCG@10"] = round(scores["ndcg@10"], 2)
        result.update(latency_runs(held[: args.latency_queries], method, args, **options))
        table.append(result)
        print(result, flush=True)
    print(f"\nload average at the end: {load_average()}")
    print(plan_summary(held[0][1]))
    keys = list(table[0])
    print("\n| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for result in table:
        print("| " + " | ".join(str(result[k]) for k in keys) + " |")
    write_json(args.json, {"rows": len(ids), "modes": table})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--ef-search", type=int, default=None, help="default: the library's EF_SEARCH"
    )
    parser.add_argument(
        "--vector-storage",
        choices=["external", "main"],
        default="external",
        help="the vector column's storage (external: pgvector's default; main: in the row)",
    )
    parser.add_argument(
        "--query-runtime",
        choices=QUERY_RUNTIMES,
        default="auto",
        help="the encoder's QUERY_RUNTIME (auto: the library's choice for this CPU)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the dev / held-out split")
    parser.add_argument("--dev-fraction", type=float, default=0.5)
    parser.add_argument("--latency-queries", type=int, default=200)
    parser.add_argument(
        "--latency-runs", type=int, default=3, help="latency measured this many times"
    )
    parser.add_argument("--prepare-only", action="store_true", help="encode the corpus and stop")
    parser.add_argument(
        "--rows",
        type=int,
        default=None,
        help="fill the table up to this many rows (texts from ../shared/data, vectors mixed "
        "from the real ones; see filler()), then report the modes with the defaults only",
    )
    parser.add_argument(
        "--fusion-families", action="store_true", help="compare RRF and convex fusion, then stop"
    )
    parser.add_argument(
        "--plan-parts",
        type=int,
        default=0,
        metavar="N",
        help="PostgreSQL's time for each part of the default hybrid search over N held-out "
        "claims (EXPLAIN ANALYZE), then stop",
    )
    add_json_option(parser)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(cpu_line())
    rows = corpus()
    texts = [embedding_text(row) for row in rows]
    vectors = encode_cached(texts, len(texts), args.threads)
    print(f"corpus: {len(rows)} SciFact abstracts, vectors {vectors.shape}")
    if args.prepare_only:
        return

    runtime = None if args.query_runtime == "auto" else args.query_runtime
    # QUERY_THREADS 1, the default path unless --query-runtime
    setup_django(args.threads, 1, args.ef_search, None, None, query_runtime=runtime)
    if args.rows and args.rows > len(rows):
        extra_rows, extra_vectors = filler(args.rows - len(rows), vectors)
        rows = rows + extra_rows
        vectors = np.concatenate([vectors, extra_vectors])
        print(f"filled up to {len(rows)} rows (see filler())")
    build = load_corpus(rows, vectors, args.vector_storage)
    ids = [row["id"] for row in rows]
    queries = queries_with_qrels()
    dev, held = split(queries, args.seed, args.dev_fraction)
    from django_sbert.conf import sbert_settings

    ef_search = sbert_settings.SEARCH["EF_SEARCH"]
    print(
        f"queries: {len(queries)} SciFact training claims with judgements; seeded split "
        f"(seed {args.seed}): {len(dev)} dev (tuning), {len(held)} held-out. HNSW m=16, "
        f"ef_construction=64 (built in {build:.1f} s), ef_search={ef_search}, vector storage "
        f"{args.vector_storage}; "
        f"{os.cpu_count()} CPUs, load average {load_average()} at start"
    )

    if args.fusion_families:
        compare_fusion_families(dev, held, ids)
        return
    if args.plan_parts:
        report_plan_parts(held, args.plan_parts)
        return
    if args.rows:
        report_defaults(dev, held, ids, args)
        return

    from django_sbert.conf import SEARCH_DEFAULTS

    Article = article_model()

    list(Article.objects.hybrid_search("warm up the encoder and the connection"))
    started = time.perf_counter()
    lists = run_lists(dev, depth=100)
    print(f"dev candidate lists in {time.perf_counter() - started:.0f} s")
    ranking = tune(lists, dev, ids)
    best = ranking[0]
    print("\ndev nDCG@10 of the fusion grid, top 8 of", len(ranking))
    for row in ranking[:8]:
        print("  ", row)
    keys = ("match", "max_df", "rrf_k", "keyword_weight", "candidates")
    chosen = {k: best[k] for k in keys}
    defaults = (
        SEARCH_DEFAULTS["KEYWORD"]["MATCH"],
        SEARCH_DEFAULTS["KEYWORD"]["MAX_DF"],
        SEARCH_DEFAULTS["FUSION"]["RRF_K"],
        SEARCH_DEFAULTS["FUSION"]["KEYWORD_WEIGHT"],
        SEARCH_DEFAULTS["FUSION"]["CANDIDATES"],
    )
    default = next((r for r in ranking if tuple(r[k] for k in keys) == defaults), None)
    if SEARCH_DEFAULTS["FUSION"]["METHOD"] != "rrf":
        default = f"{SEARCH_DEFAULTS['FUSION']['METHOD']} fusion, outside this RRF grid"
    print(f"chosen on dev: {chosen}\nthe library defaults give: {default}")
    for match, max_df in [("any", max_df) for max_df in MAX_DFS] + [("all", None)]:
        side = next(r for r in ranking if (r["match"], r["max_df"]) == (match, max_df))
        print(f"  best with match={match}, max_df={max_df}: {side}")

    modes = {
        "vector": ("similar_to", {}),
        "keyword (all words)": ("keyword_search", {"match": "all"}),
        "keyword (any word, idf)": ("keyword_search", {"match": "any"}),
        "hybrid (defaults)": ("hybrid_search", {}),
        "hybrid (tuned on dev)": ("hybrid_search", grid_options(chosen)),
    }
    table = []
    for name, (method, options) in modes.items():
        result = {"mode": name}
        for split_name, split_queries in (("dev", dev), ("held-out", held)):
            scores = evaluate(search_runs(split_queries, method, ids, **options), split_queries)
            result[f"{split_name} nDCG@10"] = round(scores["ndcg@10"], 2)
            result[f"{split_name} R@10"] = round(scores["recall@10"], 2)
        result.update(latency_runs(held[: args.latency_queries], method, args, **options))
        table.append(result)
        print(result)
    print(f"\nload average at the end: {load_average()}")
    print(plan_summary(held[0][1], **grid_options(chosen)))
    keys = list(table[0])
    print("\n| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for result in table:
        print("| " + " | ".join(str(result[k]) for k in keys) + " |")
    vector = table[0]["dev nDCG@10"]
    hybrid = table[-1]["dev nDCG@10"]
    print(f"\nhybrid (tuned) - vector on dev: {hybrid - vector:+.2f} nDCG@10 points")
    write_json(args.json, {"chosen_on_dev": chosen, "modes": table})


if __name__ == "__main__":
    main()
