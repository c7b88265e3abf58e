"""What the pages ask of the corpus besides a search: the category filter, and how much of
the corpus is embedded. The search itself is django-sbert's ``SearchView`` (views.py)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q

from .models import Article, Category

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
