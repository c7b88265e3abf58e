"""What the pages ask of django-sbert: ranked searches, and how much of the corpus is embedded."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet

from django_sbert.query.highlight import best_sentences

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


def search(
    query: str | Article, category: str | None = None, limit: int = MAX_RESULTS
) -> list[Article]:
    """The ``limit`` articles nearest to a text or to an article, nearest first.

    One query fetches the whole top list, so every page comes from the same ranking; each
    article carries ``similarity`` (cosine, 1 = same direction).
    """
    results = filtered(category).similar_to(query)[:limit]
    return list(results.only("id", "title", "body", "category", "published"))


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
