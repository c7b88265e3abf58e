"""What the pages ask of django-sbert: ranked searches, and how much of the corpus is embedded."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet

from .models import Article, Category

MAX_RESULTS = 50  # the top of one ranking, split into pages
SNIPPET_CHARS = 280

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
