"""Keyword search: PostgreSQL full text, ranked by BM25 from statistics kept by triggers.

::

    embedding = EmbeddingField(source=("title", "body"), keyword_search=True)
    Article.objects.keyword_search("interest rates", match="any")

Modules: ``column`` (the generated ``<name>_tsv`` column of a field: its configurations and
weight letters), ``tsquery`` (the tsquery of a search text, the rows it matches and their
rank; the idf-weighted ``ts_rank`` of a column without statistics), ``bm25`` (Okapi BM25F
from the stored tsvector, and the base of the rank expressions), ``statistics`` (the
collection statistics BM25 reads, kept exact by triggers that ``migrate`` installs).
The fields use ``column``, searches (``django_sbert.query``) use ``tsquery`` and ``bm25``.
See docs/hybrid.md.
"""
