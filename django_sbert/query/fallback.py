"""A search whose encoder is away, answered from the keyword side.

In the light layout (``SBERT["QUERY_SERVER"]["SOCKET"]`` a path) a web process loads no model:
the host's query server encodes its search texts. While that server is away, ``similar_to()``
and ``hybrid_search()`` of a text raise ``EncoderAway``; the REST API's search/ and
``SearchView`` then call ``from_keywords()`` and mark the answer ``degraded`` (``"keyword"``),
and the search log marks the row the same way::

    try:
        ranked = queryset.similar_to(text)
    except EncoderAway as away:
        ranked, field = from_keywords(queryset, text, away)   # keyword_score, not similarity

A model without a full-text column has no keyword side: the ``EncoderAway`` is raised again
(a 503 with ``Retry-After``). Words match with ``match="any"``: a text written for a search
by meaning rarely holds every word of the rows it means.
"""

from __future__ import annotations

import logging

from ..exceptions import EncoderAway
from ..fields import EmbeddingField, embedding_fields
from ..serving.query_client import note_degraded
from .queryset import SemanticQuerySet

logger = logging.getLogger(__name__)

DEGRADED = "keyword"  # what an answer from the keyword side is marked with


def keyword_field(model: type, name: str | None) -> EmbeddingField | None:
    """The field whose full-text column answers for ``name`` (None: the model's only one
    with such a column), or None when there is none."""
    fields = [f for f in embedding_fields(model) if f.has_keyword_search]
    if name is not None:
        fields = [f for f in fields if f.name == name]
    return fields[0] if len(fields) == 1 else None


def from_keywords(
    queryset: SemanticQuerySet,
    text: str,
    away: EncoderAway,
    *,
    k: int | None = None,
    field: str | None = None,
) -> tuple[SemanticQuerySet, str]:
    """``text``'s keyword search over ``queryset`` (ranked by BM25, ``keyword_score``), and the
    field searched; counted for the health view. Raises ``away`` when the model has no
    full-text column to answer from."""
    embedding = keyword_field(queryset.model, field)
    if embedding is None:
        raise away
    note_degraded()
    logger.warning(
        "django-sbert: %s searched by its words only (the encoder is away): %s",
        queryset.model._meta.label,
        away,
    )
    ranked = queryset.keyword_search(text, k=k, field=embedding.name, match="any")
    return ranked, embedding.name
