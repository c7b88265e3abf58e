"""``EmbeddingField``: a pgvector ``VectorField`` that knows which text it embeds.

::

    class Article(models.Model):
        title = models.CharField(max_length=300)
        body = models.TextField()
        embedding = EmbeddingField(source=("title", "body"))   # encoder="default"

``source`` is a tuple of field names, a method name, or a module-level function of the
instance. Beside the vector the field adds three bookkeeping columns, ``<name>_hash``,
``<name>_version`` and ``<name>_updated_at`` (docs/search.md says when a row is stale), and
with ``keyword_search=True`` a generated ``<name>_tsv`` column with its GIN index
(keyword/column.py).

Modules: ``embedding`` (``EmbeddingField``, its companion columns and indexes, and the
lookups ``embedding_fields`` and ``all_embedding_fields``), ``checks`` (the field's own system
checks), ``columns`` (what the columns hold: ``text_hash`` and its SQL twin, the vector
literal, the pgvector type of each precision), ``dimensions`` (an encoder's vector size,
read from its JSON configuration), ``forms`` (``EmbeddingFormField``: a vector in a form).
``from django_sbert.fields import EmbeddingField`` is the path to use; every name below is
importable from here.
"""

from __future__ import annotations

from .columns import PRECISIONS, TEXT_FIELD_TYPES, ConcatWS, Sha256Hex, text_hash, vector_literal
from .dimensions import encoder_dimensions, matryoshka_dims
from .embedding import EmbeddingField, Source, all_embedding_fields, embedding_fields
from .forms import EmbeddingFormField

__all__ = [
    "PRECISIONS",
    "TEXT_FIELD_TYPES",
    "ConcatWS",
    "EmbeddingField",
    "EmbeddingFormField",
    "Sha256Hex",
    "Source",
    "all_embedding_fields",
    "embedding_fields",
    "encoder_dimensions",
    "matryoshka_dims",
    "text_hash",
    "vector_literal",
]
