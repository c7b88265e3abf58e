"""Query -> ranked rows: ``similar_to()``, ``keyword_search()``, ``hybrid_search()``.

::

    class Article(models.Model):
        ...
        objects = SemanticManager()

    Article.objects.similar_to("central banks raise rates")[:10]
    await Article.objects.asimilar_to("central banks raise rates", k=10)   # in async code

Modules: ``queryset`` (the queryset and manager, which build the searches), ``running`` (how a
built search runs: ``k``, pgvector settings, the retry after a switch), ``options`` (per-query
settings, with their defaults from ``SBERT["SEARCH"]``), ``vectors`` (a text, row or vector
becomes the query vector; a text encoded synchronously), ``aio`` (async searches encode their
text off the event loop), ``keywords`` (a keyword search's words, their ranking and filter),
``fusion`` (hybrid search's rank or score fusion in SQL), ``suggest`` (search-as-you-type: a
prefix match fused with a vector search of the text so far), ``passages`` (rows ranked by their
best passage), ``highlight`` (the sentence of a passage that answers the query), ``binary``
(search on binary codes, re-ranked by exact cosine), ``replicas`` (which database a search
reads), ``fallback`` (a search whose encoder is away, answered from the keyword side). The
full-text pieces are in ``django_sbert.keyword``.
"""

from __future__ import annotations

from .options import (
    ITERATIVE_SCAN_MODES,
    FusionConfig,
    KeywordConfig,
    SearchOptions,
    SearchTimeout,
    search_options,
)
from .queryset import SemanticManager, SemanticQuerySet, as_semantic
from .suggest import Suggestion, suggest

__all__ = [
    "ITERATIVE_SCAN_MODES",
    "FusionConfig",
    "KeywordConfig",
    "SearchOptions",
    "SearchTimeout",
    "SemanticManager",
    "SemanticQuerySet",
    "Suggestion",
    "as_semantic",
    "search_options",
    "suggest",
]
