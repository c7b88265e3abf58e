"""What the pages ask of django-sbert: ranked searches, and how much of the corpus is embedded."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet

from django_sbert.query.highlight import best_sentences
from django_sbert.serving import peek_query_cache, query_vector, serving_record

from .models import Article, Category

MAX_RESULTS = 50  # the top of one ranking, split into pages
SNIPPET_CHARS = 280
CONTEXT_CHARS = 140  # of the best passage, shown on each side of its best sentence

# The category filter; an article filed under both matches either.
CATEGORY_FILTERS: dict[str, Q] = {
    Category.ECONOMY: Q(category__in=[Category.ECONOMY, Category.BOTH]),
    Category.POLITICS: Q(category__in=[Category.POLITICS, Category.BOTH]),
}
CATEGORY_CHOICES = [(value, Category(value).label) for value in CATEGORY_FILTERS]

# The search page's modes: what each asks of django-sbert (docs/hybrid.md).
HYBRID, VECTOR, KEYWORD = "hybrid", "vector", "keyword"
MODES = [
    (HYBRID, "Hybrid", "meaning and words, fused by reciprocal rank fusion"),
    (VECTOR, "Meaning", "vector search: cosine similarity of Sentence-BERT vectors"),
    (KEYWORD, "Words", "PostgreSQL full-text search"),
]
DEFAULT_MODE = HYBRID


@dataclass(frozen=True)
class Coverage:
    """How many articles have a vector: search only sees those."""

    embedded: int
    total: int

    @property
    def complete(self) -> bool:
        return self.embedded >= self.total

    @property
    def percent(self) -> float:
        return 100.0 * self.embedded / self.total if self.total else 100.0


def coverage() -> Coverage:
    counts = Article.objects.aggregate(
        total=Count("id"), embedded=Count("id", filter=Q(embedding__isnull=False))
    )
    return Coverage(embedded=counts["embedded"], total=counts["total"])


def filtered(category: str | None) -> QuerySet[Article]:
    if category in CATEGORY_FILTERS:
        return Article.objects.filter(CATEGORY_FILTERS[category])
    return Article.objects.all()


@dataclass(frozen=True)
class Timing:
    """How long a search took, measured in this process: encoding the query (None when the
    mode needs no vector, or the query is an article's stored vector; ``cached`` when this
    process had encoded the same text before) and the database query, fetching the rows."""

    encode_ms: float | None
    query_ms: float
    cached: bool = False

    @property
    def total_ms(self) -> float:
        return (self.encode_ms or 0.0) + self.query_ms


def search(
    query: str | Article, category: str | None = None, limit: int = MAX_RESULTS
) -> list[Article]:
    """The ``limit`` articles nearest to a text or to an article, nearest first.

    One query fetches the whole top list, so every page comes from the same ranking; each
    article carries ``similarity`` (cosine, 1 = same direction).
    """
    return timed_search(query, VECTOR, category, limit)[0]


def timed_search(
    query: str | Article, mode: str = DEFAULT_MODE, category: str | None = None,
    limit: int = MAX_RESULTS,
) -> tuple[list[Article], Timing]:  # fmt: skip
    """The top ``limit`` articles for ``query`` in ``mode``, and how long it took.

    ``vector``: nearest by cosine similarity (``similarity``). ``keyword``: PostgreSQL
    full-text search (``keyword_score``). ``hybrid``: both fused (``score``, ``similarity``,
    ``vector_rank`` and ``keyword_rank``, None for a side that did not list the article). An
    article (more like this) is always a vector search by its stored vector. The text is
    encoded first, on its own, so the two parts are timed apart; the search then finds the
    vector in the per-process query cache instead of encoding it again.
    """
    field = Article._meta.get_field("embedding")
    encode_ms, cached = None, False
    if isinstance(query, str) and mode != KEYWORD:
        started = time.perf_counter()
        cached = peek_query_cache(query, serving_record(field.encoder)) is not None
        query_vector(query, field.encoder)
        encode_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    articles = filtered(category)
    if isinstance(query, Article) or mode == VECTOR:
        ranked = articles.similar_to(query)
    elif mode == KEYWORD:
        ranked = articles.keyword_search(query, match="any")
    else:
        ranked = articles.hybrid_search(query)
    results = list(ranked[:limit].only("id", "title", "body", "category", "published"))
    query_ms = (time.perf_counter() - started) * 1000
    return results, Timing(encode_ms=encode_ms, query_ms=query_ms, cached=cached)


@dataclass(frozen=True)
class Snippet:
    """What a result shows of its best passage: the sentence that matches the query best
    (``match``), with a little of the passage around it."""

    before: str
    match: str
    after: str


def highlight(hits: Iterable[Article], query: str) -> None:
    """Give each hit found by its best passage a ``snippet``: the passage's sentence nearest to
    the query, marked, in its context. Only for the hits shown (one encode of their sentences)."""
    hits = [hit for hit in hits if getattr(hit, "passage", None)]
    marks = best_sentences(query, [hit.passage["text"] for hit in hits])
    for hit, mark in zip(hits, marks, strict=True):
        text = hit.passage["text"]
        if mark is None:
            continue
        before = text[max(0, mark.start - CONTEXT_CHARS) : mark.start]
        after = text[mark.end : mark.end + CONTEXT_CHARS]
        if mark.start > CONTEXT_CHARS:  # cut at a word, and say so
            before = "…" + before.split(" ", 1)[-1]
        if len(text) - mark.end > CONTEXT_CHARS:
            after = after.rsplit(" ", 1)[0] + "…"
        hit.snippet = Snippet(before, text[mark.start : mark.end], after)
