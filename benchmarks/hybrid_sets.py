"""Keyword and fusion defaults across corpora: nDCG@10 of every candidate default on each set.

Three kinds of data from ../shared/data, each a retrieval task with judged queries:

* ``scifact``: the 809 SciFact TRAIN claims against the 5,183 abstracts (title field A, body
  field B); BEIR's judgments. The test claims (../shared/eval) choose nothing.
* ``wikinews``: each Wikinews article's headline against every article's body (one field);
  the headline's own article is the one relevant row. 1,000 headlines, drawn with a seed.
* ``stsb``: STS Benchmark train + dev as retrieval: each distinct sentence 1 of a pair scored
  >= 4 (of 5) queries every distinct sentence 2 of the set; relevant: the sentence 2s it was
  paired with at >= 4 (pairs whose two sentences are equal once case and spaces are folded are
  left out). At most 1,000 queries, drawn with a seed.

Vectors (all-MiniLM-L6-v2, the library's default model) are encoded once and cached under
artifacts/bench/ (``benchmarks.search.encode_cached``); the vector side is the exact cosine
top list (numpy), which HNSW at ef_search 100 returns nearly always. The keyword side is
BM25F computed here in Python from the tsvectors PostgreSQL itself makes
(``to_tsvector(config, field)``: the same lexemes, positions and stop words as the keyword
column), over every row holding a query word, without the library's cost bounds (quick
score, 2,000-row candidate budget; their effect is measured in docs/benchmarks.md). One
default configuration is checked against ``keyword_search()`` and ``hybrid_search()`` in SQL
on SciFact (``--check-sql``).

What is varied (one at a time around the library's defaults, then the fusion grid on top of
the keyword side that did best across the sets): text search configuration (stemming, stop
words), a field's length as distinct lexemes or as tokens, k1, b, the title's weight,
``max_df``, the short-text rule (every word over ``max_df``: keep the rarest, or all), match
"any" or "all"; then RRF k, the keyword weight, linear (convex) fusion of normalised scores
at several weights, and the candidate depth.

    python -m benchmarks.hybrid_sets                  # every set, every candidate
    python -m benchmarks.hybrid_sets --sets scifact --check-sql
    python -m benchmarks.hybrid_sets --query-paths    # the defaults with each query path's
                                                      # vectors (ONNX Runtime float32, int8...)
    python -m benchmarks.hybrid_sets --final          # the defaults on ../shared/eval's
                                                      # SciFact test claims, once, chosen by nothing
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from benchmarks.common import DATA, SHARED, add_json_option, cpu_line, load_average, write_json

CUTOFF = 10
DEPTH = 100  # candidates per side, the largest depth tried
QUERY_SAMPLE = 1000  # wikinews and stsb: queries drawn with SEED
SEED = 0
STS_MIN = 4.0  # an STSb pair is a relevant (query, row) at this score (of 5) or more
MAX_TERMS = 16  # as keyword.tsquery.MAX_TERMS


# -- the sets ----------------------------------------------------------------------------------


@dataclass
class RetrievalSet:
    """A corpus of rows (one text per field letter) and judged queries."""

    name: str
    rows: list[dict[str, str]]  # letter -> text, e.g. {"A": title, "B": body}
    ids: list[str]
    queries: list[tuple[str, str, dict[str, int]]]  # (id, text, {row id: grade})
    note: str = ""
    vectors: Any = None  # (rows, dim) float32, normalised
    query_vectors: Any = None  # (queries, dim)
    lexed: dict[str, Any] = field(default_factory=dict)  # config -> Lexed
    # Rows encoded (the cache is keyed by every text) and then left out: repeated ids.
    repeated: list[int] = field(default_factory=list)

    def embedding_texts(self) -> list[str]:
        """What ``EmbeddingField(source=(...))`` encodes: the fields joined by a newline."""
        return ["\n".join(row[letter] for letter in sorted(row)) for row in self.rows]


def scifact(split: str = "train") -> RetrievalSet:
    folder = DATA / "scifact"
    rows, ids = [], []
    for line in (folder / "corpus.jsonl").open(encoding="utf-8"):
        doc = json.loads(line)
        rows.append({"A": doc["title"][:300], "B": doc["text"]})
        ids.append(doc["_id"])
    where = folder if split == "train" else SHARED / "eval" / "scifact"
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for line in (where / f"qrels-{split}.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, doc, score = line.split("\t")
        qrels[qid][doc] = int(score)
    queries = []
    for line in (where / f"queries-{split}.jsonl").open(encoding="utf-8"):
        query = json.loads(line)
        if query["_id"] in qrels:
            queries.append((query["_id"], query["text"], qrels[query["_id"]]))
    name = "scifact" if split == "train" else "scifact-test (held out)"
    return RetrievalSet(name, rows, ids, queries, f"{split} claims, title A + abstract B")


def wikinews() -> RetrievalSet:
    rows, ids, titles = [], [], []
    for path in sorted((DATA / "wikinews").glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            doc = json.loads(line)
            rows.append({"B": " ".join(doc["text"].split())})
            ids.append(doc["id"])
            titles.append(" ".join(doc["title"].split()))
    order = list(range(len(ids)))
    random.Random(SEED).shuffle(order)
    queries = [(ids[i], titles[i], {ids[i]: 1}) for i in sorted(order[:QUERY_SAMPLE])]
    # An article filed under both categories is in both files: one row (the first) is kept.
    seen: set[str] = set()
    repeated = [i for i, doc in enumerate(ids) if doc in seen or seen.add(doc)]
    note = "headline -> its article's body (articles in both categories once)"
    return RetrievalSet("wikinews", rows, ids, queries, note, repeated=repeated)


def stsb() -> RetrievalSet:
    from benchmarks.data import sts_pairs

    pairs = []
    for name in ("sts-train.csv", "sts-dev.csv"):
        pairs += sts_pairs(DATA / "stsbenchmark" / name)
    corpus = list(dict.fromkeys(b for _, b, _ in pairs))
    index = {text: f"s{i}" for i, text in enumerate(corpus)}
    fold = lambda text: " ".join(text.lower().split())  # noqa: E731
    relevant: dict[str, dict[str, int]] = defaultdict(dict)
    for a, b, score in pairs:
        if score * 5 >= STS_MIN and fold(a) != fold(b):
            relevant[a][index[b]] = 1
    texts = list(relevant)
    random.Random(SEED).shuffle(texts)
    queries = [(f"q{i}", text, relevant[text]) for i, text in enumerate(texts[:QUERY_SAMPLE])]
    rows = [{"B": text} for text in corpus]
    note = f"sentence 1 -> its sentence 2 (score >= {STS_MIN:g}) among all sentence 2s"
    return RetrievalSet("stsb", rows, list(index.values()), queries, note)


SETS = {"scifact": scifact, "wikinews": wikinews, "stsb": stsb}


def encode(data: RetrievalSet, threads: int) -> None:
    """The rows' and queries' vectors (cached under artifacts/bench)."""
    from benchmarks.search import encode_cached

    texts = data.embedding_texts()
    data.vectors = encode_cached(texts, len(texts), threads)
    if data.repeated:
        gone = set(data.repeated)
        keep = [i for i in range(len(texts)) if i not in gone]
        data.rows = [data.rows[i] for i in keep]
        data.ids = [data.ids[i] for i in keep]
        data.vectors = data.vectors[keep]
    queries = [text for _, text, _ in data.queries]
    data.query_vectors = encode_cached(queries, len(queries), threads)


# -- the keyword side: BM25F over PostgreSQL's lexemes, in Python ---------------------------

# Text search configurations compared: PostgreSQL's english (Snowball stemming + stop words,
# the field's default), english stemming without stop words, stop words without stemming,
# and simple (neither). The two in between are made in the benchmark's database.
CONFIGS = ("english", "sbert_english_nostop", "sbert_simple_stop", "simple")
_CONFIG_SQL = """
CREATE TEXT SEARCH DICTIONARY sbert_stem_nostop (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH CONFIGURATION sbert_english_nostop (COPY = english);
ALTER TEXT SEARCH CONFIGURATION sbert_english_nostop
    ALTER MAPPING REPLACE english_stem WITH sbert_stem_nostop;
CREATE TEXT SEARCH DICTIONARY sbert_simple_stopdict (TEMPLATE = pg_catalog.simple,
    STOPWORDS = english);
CREATE TEXT SEARCH CONFIGURATION sbert_simple_stop (COPY = simple);
ALTER TEXT SEARCH CONFIGURATION sbert_simple_stop
    ALTER MAPPING REPLACE simple WITH sbert_simple_stopdict;
"""
_ROW_LEXEMES = (
    "SELECT d.o, u.lexeme, cardinality(u.positions) FROM unnest(%s::text[]) WITH ORDINALITY "
    "AS d (t, o), unnest(to_tsvector(%s::regconfig, d.t)) AS u"
)


def make_configs() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_ts_config WHERE cfgname = 'sbert_english_nostop'")
        if cursor.fetchone() is None:
            cursor.execute(_CONFIG_SQL)


def lexemes(texts: Sequence[str], config: str) -> list[dict[str, int]]:
    """Each text's {lexeme: occurrences} as ``to_tsvector(config, text)`` stores them."""
    from django.db import connection

    out: list[dict[str, int]] = [{} for _ in texts]
    with connection.cursor() as cursor:
        for start in range(0, len(texts), 2000):
            cursor.execute(_ROW_LEXEMES, [list(texts[start : start + 2000]), config])
            for o, lexeme, count in cursor.fetchall():
                out[start + o - 1][lexeme] = count
    return out


@dataclass
class Lexed:
    """One set under one configuration: postings per lexeme, field lengths, query lexemes."""

    rows: int
    letters: tuple[str, ...]
    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # lexeme -> (row idx, tf (rows, F))
    distinct: np.ndarray  # (rows, F) distinct lexemes per field
    tokens: np.ndarray  # (rows, F) positions per field
    df: dict[str, int]
    query_lexemes: list[list[str]]


def lex(data: RetrievalSet, config: str) -> Lexed:
    if config in data.lexed:
        return data.lexed[config]
    letters = tuple(sorted({letter for row in data.rows for letter in row}))
    n = len(data.rows)
    per_field = [lexemes([row.get(letter, "") for row in data.rows], config) for letter in letters]
    distinct = np.zeros((n, len(letters)), dtype=np.float64)
    tokens = np.zeros((n, len(letters)), dtype=np.float64)
    collected: dict[str, dict[int, list[float]]] = defaultdict(dict)
    for f, rows in enumerate(per_field):
        for i, counts in enumerate(rows):
            distinct[i, f] = len(counts)
            tokens[i, f] = sum(counts.values())
            for lexeme, count in counts.items():
                collected[lexeme].setdefault(i, [0.0] * len(letters))[f] = count
    postings = {}
    for lexeme, by_row in collected.items():
        idx = np.fromiter(by_row, dtype=np.int64, count=len(by_row))
        postings[lexeme] = (idx, np.asarray(list(by_row.values()), dtype=np.float64))
    df = {lexeme: len(item[0]) for lexeme, item in postings.items()}
    asked = lexemes([text for _, text, _ in data.queries], config)
    query_lexemes = [sorted(counts) for counts in asked]
    data.lexed[config] = Lexed(n, letters, postings, distinct, tokens, df, query_lexemes)
    return data.lexed[config]


@dataclass(frozen=True)
class KeywordVariant:
    """One way to rank by keywords. The library's defaults are the field defaults."""

    config: str = "english"
    length: str = "distinct"  # a field's length: "distinct" lexemes (the library) or "tokens"
    k1: float = 1.2
    b: float = 0.75
    title_weight: float = 1.0  # weight of field A (SciFact's title); the body's is 1
    max_df: float = 0.2
    fallback: str = "rarest"  # every word over max_df: keep the "rarest" one, or "all"
    match: str = "any"

    @property
    def settable(self) -> bool:
        """Whether the library can make it its default: a configuration every PostgreSQL has,
        and a field's length as the library reads it (distinct lexemes, in C)."""
        return self.config in ("english", "simple") and self.length == "distinct"

    def label(self, base: KeywordVariant | None = None) -> str:
        base = base or KeywordVariant()
        changed = [
            f"{name}={getattr(self, name)}"
            for name in self.__dataclass_fields__
            if getattr(self, name) != getattr(base, name)
        ]
        return ", ".join(changed) or "library defaults"


def terms(lexed: Lexed, query: list[str], variant: KeywordVariant) -> list[tuple[str, float]]:
    """(lexeme, idf) of the words a query is ranked by, as ``tsquery.bm25_terms`` keeps them."""
    n = lexed.rows
    known = sorted((lexed.df[lex] / n, lex) for lex in query if lexed.df.get(lex))
    if variant.match == "any":
        kept = [item for item in known if item[0] <= variant.max_df]
        if not kept:
            kept = known[:1] if variant.fallback == "rarest" else known
        known = kept[:MAX_TERMS]
    return [(lex, math.log(1 + (n - share * n + 0.5) / (share * n + 0.5))) for share, lex in known]


def keyword_lists(data: RetrievalSet, variant: KeywordVariant, depth: int = DEPTH) -> list:
    """Each query's top ``depth`` as [(row index, BM25 score)], best first (ties: lower index)."""
    lexed = lex(data, variant.config)
    lengths = lexed.distinct if variant.length == "distinct" else lexed.tokens
    average = np.maximum(lengths.mean(axis=0), 1e-9)
    weights = np.array([variant.title_weight if letter == "A" else 1.0 for letter in lexed.letters])
    with np.errstate(divide="ignore"):  # b = 1 and an empty field: no text there to weigh
        norm = weights / (1 - variant.b + variant.b * lengths / average)  # (rows, F)
    norm[~np.isfinite(norm)] = 0.0
    k1 = variant.k1
    out = []
    for words in lexed.query_lexemes:
        chosen = terms(lexed, words, variant)
        if not chosen or (variant.match == "all" and len(chosen) < len(set(words))):
            out.append([])  # "all": a word no row holds matches nothing
            continue
        scores = np.zeros(lexed.rows)
        hits = np.zeros(lexed.rows, dtype=np.int32)
        for lexeme, idf in chosen:
            idx, tf = lexed.postings[lexeme]
            weighted = (tf * norm[idx]).sum(axis=1)
            scores[idx] += idf * weighted * (k1 + 1) / (k1 + weighted)
            hits[idx] += 1
        need = len(chosen) if variant.match == "all" else 1
        found = np.flatnonzero(hits >= need)
        order = found[np.lexsort((found, -scores[found]))][:depth]
        out.append([(int(i), float(scores[i])) for i in order])
    return out


def vector_lists(data: RetrievalSet, depth: int = DEPTH) -> list:
    """Each query's exact cosine top ``depth`` as [(row index, cosine)]."""
    similarity = data.query_vectors @ data.vectors.T  # (q, n)
    top = np.argpartition(-similarity, depth, axis=1)[:, :depth]
    out = []
    for q, row in enumerate(top):
        order = row[np.lexsort((row, -similarity[q, row]))]
        out.append([(int(i), float(similarity[q, i])) for i in order])
    return out


# -- scoring and fusion ------------------------------------------------------------------------


def ndcg(ranked: Iterable[int], data: RetrievalSet, q: int) -> float:
    relevant = data.queries[q][2]
    ids = data.ids
    dcg = sum(
        (2 ** relevant.get(ids[doc], 0) - 1) / math.log2(i + 2)
        for i, doc in enumerate(list(ranked)[:CUTOFF])
    )
    ideal = sorted(relevant.values(), reverse=True)[:CUTOFF]
    idcg = sum((2**rel - 1) / math.log2(i + 2) for i, rel in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def mean_ndcg(data: RetrievalSet, runs: Sequence[Iterable[int]]) -> float:
    return 100 * float(np.mean([ndcg(run, data, q) for q, run in enumerate(runs)]))


@dataclass(frozen=True)
class Fusion:
    method: str = "rrf"
    rrf_k: float = 1.0
    vector_weight: float = 1.0
    keyword_weight: float = 1.0
    candidates: int = 100

    def label(self) -> str:
        if self.method == "rrf":
            kw = f", kw {self.keyword_weight:g}" if self.keyword_weight != 1 else ""
            return f"RRF k={self.rrf_k:g}{kw}, depth {self.candidates}"
        return f"linear {self.vector_weight:g}/{self.keyword_weight:g}, depth {self.candidates}"


def fuse(vector: list, keyword: list, fusion: Fusion) -> list[int]:
    """``hybrid_search()``'s fused order in Python (``finetuning.hybrid.fuse``, the twin the
    tests hold to the SQL), on each side's top ``candidates``."""
    from django_sbert.finetuning.hybrid import fuse as library_fuse

    n = fusion.candidates
    return library_fuse(
        vector[:n],
        keyword[:n],
        fusion=fusion.method,
        rrf_k=fusion.rrf_k,
        vector_weight=fusion.vector_weight,
        keyword_weight=fusion.keyword_weight,
    )[:CUTOFF]


def hybrid_ndcg(data: RetrievalSet, vector: list, keyword: list, fusion: Fusion) -> float:
    return mean_ndcg(data, [fuse(v, k, fusion) for v, k in zip(vector, keyword, strict=True)])


# -- the candidates ----------------------------------------------------------------------------

LIBRARY = KeywordVariant()  # what the library ranked by before this comparison


def keyword_variants() -> list[KeywordVariant]:
    """The library's keyword side, then each alternative one change away from it."""
    base = LIBRARY
    out = [base]
    out += [replace(base, config=config) for config in CONFIGS[1:]]
    out += [replace(base, length="tokens")]
    out += [replace(base, k1=k1) for k1 in (0.6, 0.9, 1.5, 2.0)]
    out += [replace(base, b=b) for b in (0.3, 0.5, 0.9, 1.0)]
    out += [replace(base, title_weight=w) for w in (0.5, 2.0, 3.0)]
    out += [replace(base, max_df=m) for m in (0.05, 0.1, 0.3, 0.5, 1.0)]
    out += [replace(base, fallback="all")]
    out += [replace(base, match="all")]
    return out


def fusions() -> list[Fusion]:
    """RRF at k 1, 10, 60 (and 5, 20, 30) and a few keyword weights, linear (convex) fusion of
    normalised scores at vector weights 0.3 to 0.9, each at depth 20, 50 and 100."""
    out = []
    for depth in (100, 50, 20):
        for k in (1, 5, 10, 20, 30, 60):
            for weight in (0.5, 0.75, 1.0, 1.5):
                out.append(Fusion("rrf", float(k), 1.0, weight, depth))
        for alpha in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
            out.append(Fusion("linear", 1.0, alpha, round(1 - alpha, 2), depth))
    return out


def combine(fused: Mapping[KeywordVariant, Mapping[str, float]], names: Sequence[str]):
    """The settable variant that takes, for each parameter, the value whose one-change
    variant fused best on average (the library's where none beat it)."""
    mean = lambda v: float(np.mean([fused[v][n] for n in names]))  # noqa: E731
    out = LIBRARY
    for name in ("k1", "b", "title_weight", "max_df", "fallback"):
        options = [LIBRARY] + [v for v in fused if v.label() == f"{name}={getattr(v, name)}"]
        best = max(options, key=mean)  # the first of equals: the library's
        out = replace(out, **{name: getattr(best, name)})
    return out


def tuned_table(sets, vectors, lists, variant, fusion, old) -> list[tuple]:
    """Per set: vector, keyword alone, hybrid with the old and the chosen defaults, and a
    fusion tuned on half of the set's queries (``finetuning.hybrid.choose_fusion``, as a
    site's own judged queries tune it) against the chosen default on the other half."""
    from django_sbert.finetuning.hybrid import choose_fusion, split_queries

    rows = []
    for data in sets:
        name = data.name
        depth = fusion.candidates
        index = {doc: i for i, doc in enumerate(data.ids)}
        qids = [str(q) for q in range(len(data.queries))]
        relevant = {
            qid: {index[d]: g for d, g in data.queries[int(qid)][2].items() if d in index}
            for qid in qids
        }
        vector = {qid: vectors[name][int(qid)][:depth] for qid in qids}
        keyword = {qid: lists[variant, name][int(qid)][:depth] for qid in qids}
        current = {
            "fusion": fusion.method,
            "rrf_k": fusion.rrf_k,
            "vector_weight": fusion.vector_weight,
            "keyword_weight": fusion.keyword_weight,
        }
        choice = choose_fusion(vector, keyword, relevant, current)
        _, held = split_queries(qids)
        held_set = RetrievalSet(name, data.rows, data.ids, [data.queries[int(q)] for q in held])
        kw_held = mean_ndcg(held_set, [[i for i, _ in keyword[q]] for q in held])
        old_held = mean_ndcg(
            held_set,
            [fuse(vectors[name][int(q)], lists[old[0], name][int(q)], old[1]) for q in held],
        )
        tuned = choice["candidate"]
        label = (
            f"RRF k={tuned['rrf_k']:g}, {tuned['vector_weight']:g}/{tuned['keyword_weight']:g}"
            if tuned["fusion"] == "rrf"
            else f"linear {tuned['vector_weight']:g}/{tuned['keyword_weight']:g}"
        )
        rows.append(
            (
                name,
                len(held),
                mean_ndcg(held_set, [[i for i, _ in vector[q]][:CUTOFF] for q in held]),
                kw_held,
                old_held,
                choice["heldout_current"] * 100,
                choice["heldout_candidate"] * 100,
                label,
                "yes" if choice["used"] else "no",
            )
        )
    return rows


REFERENCE_FUSIONS = (Fusion("rrf", 1.0), Fusion("rrf", 60.0), Fusion("linear", 1.0, 0.5, 0.5))


def choose(table: Mapping[Any, Mapping[str, float]], names: Sequence[str], slack: float = 1.0):
    """The candidate within ``slack`` points of each set's best on every set with the highest
    mean; where none is, the one whose largest loss is smallest. Returns (candidate, losses)."""
    best = {name: max(row[name] for row in table.values()) for name in names}
    losses = {c: {n: best[n] - row[n] for n in names} for c, row in table.items()}
    within = [c for c in table if max(losses[c].values()) <= slack + 1e-9]
    if within:
        chosen = max(within, key=lambda c: np.mean([table[c][n] for n in names]))
    else:
        chosen = min(table, key=lambda c: max(losses[c].values()))
    return chosen, losses[chosen]


def markdown(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def compare(sets: list[RetrievalSet]) -> dict[str, Any]:
    """Stage 1: every keyword variant alone and fused three ways; stage 2: every fusion on the
    best keyword variants. Prints the tables; returns the figures and the choice."""
    names = [data.name for data in sets]
    vectors = {data.name: vector_lists(data) for data in sets}
    print(
        markdown(
            ["set", "rows", "queries", "what", "vector nDCG@10"],
            [
                (
                    d.name,
                    len(d.rows),
                    len(d.queries),
                    d.note,
                    mean_ndcg(d, [[i for i, _ in run] for run in vectors[d.name]]),
                )
                for d in sets
            ],
        )
    )
    stage1: dict[KeywordVariant, dict[str, dict[str, float]]] = {}
    lists: dict[tuple[KeywordVariant, str], list] = {}
    for variant in keyword_variants():
        started = time.perf_counter()
        stage1[variant] = {}
        for data in sets:
            keyword = keyword_lists(data, variant)
            lists[variant, data.name] = keyword
            row = {"keyword": mean_ndcg(data, [[i for i, _ in run] for run in keyword])}
            for fusion in REFERENCE_FUSIONS:
                row[fusion.label()] = hybrid_ndcg(data, vectors[data.name], keyword, fusion)
            stage1[variant][data.name] = row
        print(f"  {variant.label()}: {time.perf_counter() - started:.1f} s", flush=True)
    columns = ["keyword", *(f.label() for f in REFERENCE_FUSIONS)]
    print("\nStage 1: keyword variants, alone and fused (nDCG@10)\n")
    header = ["keyword variant"] + [f"{n} {c}" for n in names for c in ("keyword", "hybrid*")]
    rows = []
    for variant, by_set in stage1.items():
        cells = []
        for name in names:
            cells += [by_set[name]["keyword"], max(by_set[name][c] for c in columns[1:])]
        rows.append((variant.label(), *cells))
    print(markdown(header, rows))
    print("\n(hybrid*: the best of " + "; ".join(columns[1:]) + ")")
    keyword_alone = {v: {n: s[n]["keyword"] for n in names} for v, s in stage1.items()}
    fused_best = {
        v: {n: max(s[n][c] for c in columns[1:]) for n in names} for v, s in stage1.items()
    }
    mean = lambda v: float(np.mean(list(fused_best[v].values())))  # noqa: E731
    top = sorted(fused_best, key=lambda v: -mean(v))[:4]
    combined = combine(fused_best, names)
    for variant in (LIBRARY, combined):
        if variant not in top:
            top.append(variant)
            if variant not in stage1:  # measured like the others, for stage 2
                for data in sets:
                    lists[variant, data.name] = keyword_lists(data, variant)
                keyword_alone[variant] = {
                    d.name: mean_ndcg(d, [[i for i, _ in run] for run in lists[variant, d.name]])
                    for d in sets
                }
    stage2: dict[tuple[KeywordVariant, Fusion], dict[str, float]] = {}
    for variant in top:
        for fusion in fusions():
            stage2[variant, fusion] = {
                d.name: hybrid_ndcg(d, vectors[d.name], lists[variant, d.name], fusion)
                for d in sets
            }
    # The keyword settings are keyword_search()'s too: the keyword side is the settable
    # variant chosen by keyword search alone; the fusion, the one on that side within a point
    # of each set's best hybrid (over everything tried) with the highest mean.
    settable = {v: row for v, row in keyword_alone.items() if v.settable}
    kw_choice, kw_losses = choose(settable, names)
    print(f"keyword side, chosen among the settable variants: {kw_choice.label()}")
    if kw_choice not in top:
        top.append(kw_choice)
        for fusion in fusions():
            stage2[kw_choice, fusion] = {
                d.name: hybrid_ndcg(d, vectors[d.name], lists[kw_choice, d.name], fusion)
                for d in sets
            }
    best_all = {n: max(row[n] for row in stage2.values()) for n in names}
    on_side = {c: row for c, row in stage2.items() if c[0] == kw_choice}
    within = [c for c in on_side if all(best_all[n] - on_side[c][n] <= 1.0 + 1e-9 for n in names)]
    if within:
        chosen = max(within, key=lambda c: np.mean([on_side[c][n] for n in names]))
    else:
        chosen = min(on_side, key=lambda c: max(best_all[n] - on_side[c][n] for n in names))
    losses = {n: best_all[n] - stage2[chosen][n] for n in names}
    best_any = choose(stage2, names)[0]
    best = {n: max(row[n] for row in stage2.values()) for n in names}
    print("\nStage 2: fusions on the best keyword sides (nDCG@10; top 25 by mean)\n")
    ranked = sorted(stage2, key=lambda c: -np.mean(list(stage2[c].values())))
    rows = [
        (
            v.label(),
            f.label(),
            *(stage2[v, f][n] for n in names),
            max(best[n] - stage2[v, f][n] for n in names),
        )
        for v, f in ranked[:25]
    ]
    print(markdown(["keyword side", "fusion", *names, "worst loss"], rows))
    print("\nEach set's best: " + ", ".join(f"{n} {best[n]:.2f}" for n in names))
    variant, fusion = chosen
    print(f"chosen: keyword {variant.label()}; fusion {fusion.label()}; losses {losses}")
    print(f"keyword alone with it: {keyword_alone[variant]} (losses {kw_losses})")
    print(
        f"(best of all, settable or not: keyword {best_any[0].label()}; fusion "
        f"{best_any[1].label()}: "
        + ", ".join(f"{n} {stage2[best_any][n]:.2f}" for n in names)
        + ")"
    )
    library = (LIBRARY, Fusion("rrf", 1.0))
    print(
        "library defaults before: "
        + ", ".join(f"{n} {stage2[library][n]:.2f}" for n in names)
        + "; after: "
        + ", ".join(f"{n} {stage2[chosen][n]:.2f}" for n in names)
    )
    per_fusion = [
        (
            f.label(),
            *(stage2[variant, f][n] for n in names),
            *(lists_alone for lists_alone in [keyword_alone[variant][n] for n in names]),
        )
        for f in fusions()
        if f.candidates == fusion.candidates or f == fusion
    ]
    print(
        f"\nEach fusion on the chosen keyword side (depth {fusion.candidates}), keyword alone "
        "beside\n"
    )
    print(markdown(["fusion", *names, *(f"{n} keyword" for n in names)], per_fusion))
    print(
        "\nOn each set's held-out half (queries split as a site's are, finetuning.hybrid."
        "split_queries): the defaults before and after, and a fusion tuned on the other half\n"
    )
    tuned = tuned_table(sets, vectors, lists, variant, fusion, library)
    print(
        markdown(
            [
                "set",
                "held-out queries",
                "vector",
                "keyword (chosen)",
                "hybrid, old defaults",
                "hybrid, new defaults",
                "hybrid, tuned on the other half",
                "tuned fusion",
                "it would serve",
            ],
            tuned,
        )
    )
    return {
        "tuned": tuned,
        "stage1": [{"variant": v.label(), **s} for v, s in stage1.items()],
        "stage2": [{"variant": v.label(), "fusion": f.label(), **stage2[v, f]} for v, f in ranked],
        "chosen": {"keyword": v.__dict__ if (v := variant) else None, "fusion": fusion.__dict__},
        "losses": losses,
    }


def sql_figures(data: RetrievalSet) -> dict[str, float]:
    """The same set through the library in SQL (SciFact only: the test app's Article has a
    title and a body): ``similar_to``, ``keyword_search(match="any")`` and ``hybrid_search``
    with the settings' defaults, HNSW and the cost bounds included."""
    from benchmarks.hybrid import evaluate, load_corpus, search_runs

    rows = [{"title": row["A"], "body": row["B"]} for row in data.rows]
    load_corpus(rows, data.vectors)
    out = {}
    for name, mode, options in (
        ("vector", "similar_to", {}),
        ("keyword", "keyword_search", {"match": "any"}),
        ("hybrid", "hybrid_search", {}),
    ):
        runs = search_runs(data.queries, mode, data.ids, **options)
        out[name] = evaluate(runs, data.queries)["ndcg@10"]
    return out


def library_defaults() -> tuple[KeywordVariant, Fusion]:
    """The keyword side and fusion SBERT["SEARCH"]'s defaults give (conf/declaration.py)."""
    from django_sbert.conf import SEARCH_DEFAULTS

    keyword, fusion = SEARCH_DEFAULTS["KEYWORD"], SEARCH_DEFAULTS["FUSION"]
    b = keyword["B"] if not isinstance(keyword["B"], Mapping) else keyword["B"].get("B", 0.75)
    variant = KeywordVariant(
        k1=keyword["K1"],
        b=b,
        title_weight=keyword["WEIGHTS"]["A"] / keyword["WEIGHTS"]["B"],
        max_df=keyword["MAX_DF"],
        match=keyword["MATCH"],
    )
    chosen = Fusion(
        fusion["METHOD"],
        float(fusion["RRF_K"]),
        float(fusion["VECTOR_WEIGHT"]),
        float(fusion["KEYWORD_WEIGHT"]),
        int(fusion["CANDIDATES"]),
    )
    return variant, chosen


def final(data: RetrievalSet, sql: bool = True) -> dict[str, Any]:
    """The library's defaults on one set, in Python and (``sql``) through the library."""
    variant, fusion = library_defaults()
    vector = vector_lists(data)
    keyword = keyword_lists(data, variant)
    figures = {
        "vector": mean_ndcg(data, [[i for i, _ in run] for run in vector]),
        "keyword": mean_ndcg(data, [[i for i, _ in run] for run in keyword]),
        "hybrid": hybrid_ndcg(data, vector, keyword, fusion),
    }
    print(f"{data.name}, {len(data.queries)} queries; keyword {variant.label()}, {fusion.label()}")
    print(f"  in Python (exact vector top list, no cost bounds): {figures}")
    if sql and data.name.startswith("scifact"):
        through = sql_figures(data)
        print(f"  through the library in SQL (HNSW, cost bounds): {through}")
        figures = {"python": figures, "sql": through}
    return figures


def compare_query_paths(sets: Sequence[RetrievalSet], threads: int) -> dict[str, Any]:
    """The library's defaults on each set with the queries encoded in one batch (torch
    float32, what the rest of this benchmark uses) and alone by each query path: how much a
    path's vectors move vector and hybrid nDCG@10 on each kind of data (``--query-paths``)."""
    from benchmarks.query_encode import our_paths

    variant, fusion = library_defaults()
    paths = our_paths(threads, ("onnxruntime", "onnxruntime int8", "compiled bfloat16"))
    figures: dict[str, Any] = {}
    rows = []
    for data in sets:
        keyword = keyword_lists(data, variant)
        batch = data.query_vectors
        for name, encode in {"batch float32": None, **paths}.items():
            if encode is not None:
                data.query_vectors = np.stack([encode(text) for _, text, _ in data.queries])
            lowest = float((data.query_vectors * batch).sum(axis=1).min())  # unit vectors
            vector = vector_lists(data)
            scores = {
                "vector": mean_ndcg(data, [[i for i, _ in run] for run in vector]),
                "hybrid": hybrid_ndcg(data, vector, keyword, fusion),
                "lowest cosine to batch": lowest,
            }
            figures.setdefault(data.name, {})[name] = scores
            rows.append((data.name, name, scores["vector"], scores["hybrid"], f"{lowest:.4f}"))
            print(f"{data.name}, {name}: {scores}", flush=True)
        data.query_vectors = batch
    header = ("set", "queries encoded", "vector nDCG@10", "hybrid nDCG@10", "lowest cosine")
    print("\n" + markdown(header, rows))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    parser.add_argument("--threads", type=int, default=2, help="torch threads (encoding)")
    parser.add_argument(
        "--final",
        action="store_true",
        help="report the library's defaults on ../shared/eval's SciFact test claims and stop",
    )
    parser.add_argument(
        "--check-sql",
        action="store_true",
        help="the settings' defaults in Python and, on SciFact, through the library in SQL",
    )
    parser.add_argument(
        "--query-paths",
        action="store_true",
        help="the defaults with each query encoded alone by each query path (ONNX Runtime "
        "float32 and int8, compiled bf16), beside one batch",
    )
    parser.add_argument(
        "--ef-search", type=int, help="hnsw.ef_search for the SQL figures (default: the library's)"
    )
    add_json_option(parser)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(cpu_line())
    print(f"load average at start: {load_average()}")
    started = time.perf_counter()
    sets = [scifact("test")] if args.final else [SETS[name]() for name in args.sets]
    for data in sets:
        encode(data, args.threads)
    from benchmarks.search import setup_django

    setup_django(args.threads, 1, args.ef_search, None, None)
    make_configs()
    if args.final:
        figures = final(sets[0])
    elif args.check_sql:
        figures = {data.name: final(data) for data in sets}
    elif args.query_paths:
        figures = compare_query_paths(sets, 1)
    else:
        figures = compare(sets)
    print(f"\n{time.perf_counter() - started:.0f} s; load average at the end: {load_average()}")
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
