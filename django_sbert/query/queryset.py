"""``similar_to()``, ``keyword_search()``, ``hybrid_search()``: ranked, chainable querysets.

::

    class Article(models.Model):
        ...
        objects = SemanticManager()

    Article.objects.similar_to("central banks raise rates")[:10]         # text
    Article.objects.filter(category="economy").similar_to(article)[:5]   # more like this
    Article.objects.similar_to(vector, min_similarity=0.5).values("title", "similarity")
    Article.objects.keyword_search("XJ-9000 manual")[:10]                # PostgreSQL full text
    Article.objects.hybrid_search("ECB rate decision 2008", k=10)         # both, fused (RRF)
    Article.objects.suggest("central bank inter", k=5)                     # as you type
    await Article.objects.asimilar_to("central banks", k=10)              # async code (aio.py)

How it stays fast and correct (see docs/search.md):

* it orders by ``embedding <=> query`` (``CosineDistance``), the operator of an HNSW index built
  with ``vector_cosine_ops``; ordering by the ``similarity`` annotation would bypass the index;
* a keyword search ranks at most ``KEYWORD_MAX_ROWS`` matching rows (fusion.CappedMatch);
* the search runs with ``k``, its pgvector settings and ``STATEMENT_TIMEOUT``, and once more
  after a promotion's switch, as running.py describes (``RankedQuerySet``, the base class).

``hybrid_search()`` shares the encoding, the filtering and the index settings with
``similar_to()``; its SQL is described in fusion.py, the full-text pieces in django_sbert.keyword.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from asgiref.sync import sync_to_async
from django.db import models
from pgvector import Vector

from ..fields import EmbeddingField, embedding_fields
from ..fields.columns import vector_literal
from ..keyword import tsquery
from .aio import PendingVector, encode_text, pending_text_vector
from .binary import reranked
from .fusion import FusedJoin, Fusion, fused_annotations, fusion_plan, served_fusion
from .keywords import check_keyword_search, keyword_filter, keyword_plan
from .options import (
    FusionConfig,
    KeywordConfig,
    SearchOptions,
    binary_oversample,
    hybrid_configs,
    keyword_max_rows,
    match_mode,
)
from .passages import PassageSearch, hybrid_annotations, join_passages, uses_passages
from .replicas import search_database
from .running import RankedQuerySet
from .suggest import Suggestion, suggest
from .vectors import (
    QuerySource,
    as_vector,
    cosine_distance,
    instance_vector,
    same_version,
    text_vector,
)


class SemanticQuerySet(RankedQuerySet):
    """A QuerySet with ``similar_to()``; everything else is plain Django."""

    def similar_to(
        self,
        query: str | models.Model | Sequence[float] | np.ndarray | Vector,
        k: int | None = None,
        min_similarity: float | None = None,
        field: str | None = None,
        *,
        ef_search: int | None = None,
        iterative_scan: str | None = None,
        passages: bool | None = None,
        oversample: int | None = None,
    ) -> SemanticQuerySet:
        """Rows nearest to ``query`` by cosine similarity, nearest first.

        ``query`` is a text (encoded in this process, cached), a model instance (more like
        this: its stored vector, the instance itself excluded) or a vector. Each row gets a
        ``similarity`` annotation (1 - cosine distance); rows without an embedding are left out.
        ``k`` caps the rows returned when the queryset is not sliced (default
        ``SBERT["SEARCH"]["K"]``); slicing, e.g. by a paginator, takes its place. The vector
        column itself is deferred; ``.defer(None)`` loads it with the rows.

        On a field with ``passages=``, a text or a vector ranks rows by their best passage
        (``passages=False``: by the row's own vector) and each row also gets ``passage``: the
        best passage's ``text``, ``start`` and ``end`` in the source text, and ``index``
        (query/passages.py, docs/passages.md).

        On a field with ``binary_index=True`` the rows are the top ``k x oversample`` by the
        Hamming distance of their binary codes, re-ranked by exact cosine (query/binary.py;
        default ``options.BINARY_OVERSAMPLE``, 0: search the float vectors).
        """
        embedding = self._embedding_field(field)
        binary = binary_oversample(embedding, oversample)
        pinned = self._pinned()  # rows and version from one database (query/replicas.py)
        vector, exclude_pk, source = pinned._query_vector(query, embedding)
        literal = vector_literal(vector)  # pgvector text, written once for every use below
        distance = cosine_distance(embedding, literal, source)
        qs = pinned.filter(
            **{f"{embedding.attname}__isnull": False}, **same_version(embedding, source)
        )
        if exclude_pk is not None:
            qs = qs.exclude(pk=exclude_pk)
        ties: tuple[str, ...] = ()
        if uses_passages(embedding, query, passages):
            # Max-sim: each row's best passage, from the passage index (query/passages.py).
            search = PassageSearch.for_field(embedding, literal, source)
            qs, distance, passage = join_passages(qs, search)
            qs, ties = qs.annotate(passage=passage), ("pk",)  # rows sharing a passage: by pk
        elif binary:
            # Hamming top-N on the binary index, re-ranked exactly (query/binary.py).
            candidates, distance = reranked(embedding, literal, source, binary)
            qs, ties = qs.filter(candidates), ("pk",)
        if min_similarity is not None:
            qs = qs.alias(_sbert_distance=distance).filter(
                _sbert_distance__lte=1.0 - float(min_similarity)
            )
        qs = qs.annotate(similarity=1.0 - distance).order_by(distance, *ties)
        qs = qs._searching(embedding, k=k, ef_search=ef_search, iterative_scan=iterative_scan)
        qs._search_ordering = qs.query.order_by
        qs._search_source = source
        return qs

    def keyword_search(
        self,
        text: str,
        k: int | None = None,
        field: str | None = None,
        *,
        match: str = "all",
        max_df: float | None = None,
        rank: str | None = None,
    ) -> SemanticQuerySet:
        """Rows matching ``text`` by PostgreSQL full-text search, best first.

        Needs ``EmbeddingField(..., keyword_search=True)``. ``match="all"`` reads ``text`` like
        a web search box (``websearch_to_tsquery``: every word, ``"a phrase"``, ``-not``,
        ``or``); ``match="any"`` finds rows containing any of its words (words in more than
        ``max_df`` of the rows, default ``SBERT["SEARCH"]["KEYWORD"]["MAX_DF"]``, are left out).
        Rows are ranked by Okapi BM25 over the source fields (``rank="bm25"``, the one
        ranking), each with ``keyword_score``. No vector is computed, and rows need no
        embedding. An empty or punctuation-only text matches nothing. The words' statistics are
        read with one small query when called. At most ``options.KEYWORD_MAX_ROWS`` matching
        rows are ranked (the first PostgreSQL finds that pass the filters), so a word most rows
        hold costs no more than that; ``count()`` is at most that many, and with BM25 at most
        ``max(k, options.BM25_RESCORE)`` (the best by a quick score get the exact one).
        """
        tsquery.check_text(text)
        embedding = self._embedding_field(field, keyword=True)
        match = match_mode(match)
        max_rows = keyword_max_rows()  # checked even when no word is searched for
        pinned = self._pinned()
        plan = keyword_plan(pinned, embedding, text, match, max_df, rank)  # query/keywords.py
        matches, rank_expression = keyword_filter(embedding, text, match, plan, k, max_rows)
        qs = pinned.filter(matches).annotate(keyword_score=rank_expression)
        qs = qs.order_by(models.F("keyword_score").desc(), "pk")
        qs = qs._searching(embedding, k=k, vector_settings=False)
        qs._search_ordering = None
        return qs

    def hybrid_search(
        self,
        text: str,
        k: int | None = None,
        field: str | None = None,
        *,
        fusion: FusionConfig | str | None = None,
        keyword: KeywordConfig | None = None,
        candidates: int | None = None,
        rrf_k: float | None = None,
        vector_weight: float | None = None,
        keyword_weight: float | None = None,
        match: str | None = None,
        max_df: float | None = None,
        rank: str | None = None,
        ef_search: int | None = None,
        iterative_scan: str | None = None,
        passages: bool | None = None,
    ) -> SemanticQuerySet:
        """Rows ranked by a fusion of vector and keyword search, best first.

        ``fusion=FusionConfig(method, rrf_k, candidates, vector_weight, keyword_weight)``
        (or the method's name alone) and ``keyword=KeywordConfig(match, max_df)`` choose how;
        what they leave out comes from ``SBERT["SEARCH"]["FUSION"]`` and ``["KEYWORD"]``,
        except that while a fine-tuned version whose run chose a fusion on its eval split
        serves, its fusion comes first (``SEARCH["FUSION"]["TUNED"]``; docs/hybrid.md). The
        options as keyword arguments of their own (``rrf_k=``, ``match=``...) still work, with
        a ``DeprecationWarning``.

        The ``candidates`` nearest rows (HNSW, as ``similar_to``) and best full-text matches
        (GIN, as ``keyword_search``) are fused (query/fusion.py: ``"rrf"`` by rank, ``"linear"``
        by normalised score), a side giving nothing to a row outside its list. Rows get
        ``score``, ``similarity`` (None without an embedding), ``vector_rank``,
        ``keyword_rank`` (None when absent) and ``keyword_score``. Filters, chained before or
        after, apply to both lists. Needs ``EmbeddingField(..., keyword_search=True)``. A blank
        text returns no rows. On a field with ``passages=`` the vector side ranks rows by their
        best passage, and each row gets ``passage`` (``passages=False``: the row's vector).
        """
        if not isinstance(text, str):
            raise TypeError(
                f"hybrid_search() takes the search text, not {type(text).__name__}; use "
                "similar_to() to search by a vector or a model instance."
            )
        tsquery.check_text(text)
        if self._is_hybrid():
            raise ValueError(
                "hybrid_search() is already applied to this queryset; call it once, on a "
                "queryset without it (filters may come before or after)."
            )
        given, keyword = hybrid_configs(
            fusion,
            keyword,
            candidates=candidates,
            rrf_k=rrf_k,
            vector_weight=vector_weight,
            keyword_weight=keyword_weight,
            match=match,
            max_df=max_df,
            rank=rank,
        )
        keyword = keyword.resolved()
        embedding = self._embedding_field(field, keyword=True)
        qs = self._pinned()  # rows and version from one database (query/replicas.py)
        # The text is encoded while PostgreSQL ranks the keyword side.
        source, pending, wait = (None, None, None)
        if text.strip():
            source, pending, wait = qs._text_vector_pending(text, embedding)
        chosen = served_fusion(given, source)
        text = str(text)  # ahybrid_search() passes an EncodedText: from here on, the words
        fusion = fusion_plan(embedding, text, chosen, str(keyword.match), source)
        if wait is None:
            qs = qs.none()
        else:
            plan = keyword_plan(
                qs,
                embedding,
                text,
                fusion.match,
                keyword.max_df,
                keyword.rank,
                fusion,
                pending,
            )
            literal = vector_literal(wait())
            search = binary = None
            if uses_passages(embedding, text, passages):
                search = PassageSearch.for_field(embedding, literal, source)  # query/passages.py
            oversample = binary_oversample(embedding, None)
            if oversample is not None:  # the top candidates of candidates x oversample codes
                top = fusion.candidates * oversample
                binary = reranked(embedding, literal, source, oversample, top)  # query/binary.py
            fusion = plan.applied_to(fusion, vector_literal=literal, passages=search, binary=binary)
        qs = qs._fused(fusion, embedding, encoded=wait is not None)
        qs = qs._searching(embedding, k=k, ef_search=ef_search, iterative_scan=iterative_scan)
        qs._search_ordering = None
        qs._search_source = fusion.source
        return qs

    def _fused(self, fusion: Fusion, embedding: EmbeddingField, encoded: bool) -> SemanticQuerySet:
        """This queryset joined to ``fusion``'s table, annotated and ranked by its score
        (``encoded``: the text has a vector, so rows get a similarity)."""
        source, literal = fusion.source, fusion.vector_literal
        same = models.Q(**same_version(embedding, source))
        parent = self.query.get_initial_alias()
        alias = self.query.join(FusedJoin(fusion, self.model._meta.pk.column, parent))
        annotations: dict[str, Any] = dict(fused_annotations(alias))
        annotations["similarity"] = models.Value(None, output_field=models.FloatField())
        if encoded:
            # A row found by its words alone may still carry another version's vector (a
            # switch in progress): it gets no similarity rather than a meaningless one.
            annotations["similarity"] = models.Case(
                models.When(same, then=1.0 - cosine_distance(embedding, literal, source)),
                output_field=models.FloatField(),
            )
        if fusion.passages is not None:  # similarity and passage of each row's best passage
            annotations.update(hybrid_annotations(fusion.passages, same))
        return self.annotate(**annotations).order_by(models.F("score").desc(), "pk")

    def suggest(
        self, text: str, k: int | None = None, field: str | None = None, **options: Any
    ) -> list[Suggestion]:
        """Search-as-you-type: up to ``k`` ``Suggestion``s for the text typed so far, best first:
        a prefix match of its words fused with a vector search of it; a list, not a queryset
        (query/suggest.py, docs/hybrid.md)."""
        return suggest(self, text, k, field, **options)

    # -- async: the query text is encoded off the event loop (aio.py) ------------------------

    async def asimilar_to(
        self,
        query: str | models.Model | Sequence[float] | np.ndarray | Vector,
        k: int | None = None,
        min_similarity: float | None = None,
        field: str | None = None,
        **options: Any,
    ) -> SemanticQuerySet:
        """``similar_to()`` for async code: ``await Article.objects.asimilar_to(text)``.

        A text is encoded in a small pool of threads, never on the event loop; the queryset
        is built in Django's thread for database work (a row's vector, the serving version).
        Iterate the result with ``async for`` or ``aiterator()``, or call ``acount()``,
        ``afirst()``...: ``k``, the pgvector settings and the statement timeout apply.
        """
        qs = self._pinned()  # the text is encoded with the version of the database searched
        if isinstance(query, str):
            query = await encode_text(query, qs._embedding_field(field).encoder, qs.db)
        return await sync_to_async(qs.similar_to)(query, k, min_similarity, field, **options)

    async def ahybrid_search(
        self, text: str, k: int | None = None, field: str | None = None, **options: Any
    ) -> SemanticQuerySet:
        """``hybrid_search()`` for async code; the text is encoded off the event loop."""
        qs = self._pinned()
        if isinstance(text, str):
            text = await encode_text(text, qs._embedding_field(field, keyword=True).encoder, qs.db)
        return await sync_to_async(qs.hybrid_search)(text, k, field, **options)

    async def akeyword_search(
        self, text: str, k: int | None = None, field: str | None = None, **options: Any
    ) -> SemanticQuerySet:
        """``keyword_search()`` for async code (``match="any"`` reads word statistics)."""
        return await sync_to_async(self.keyword_search)(text, k, field, **options)

    # -- what the searches share ------------------------------------------------------------

    def _query_vector(
        self, query: Any, embedding: EmbeddingField
    ) -> tuple[np.ndarray, Any | None, QuerySource | None]:
        """The query as a vector of the field's size (a text's, or the encoder's full vector
        given to a field that truncates, cut to it), the pk to leave out (more like this), and
        where the vector came from, with its encoder version (None for a vector passed in).

        Searches compare the vector only with rows of that version (``<field>_version``), so
        a query never mixes the vectors of two encoder versions, even while a promotion
        switches them (docs/fine-tuning.md).
        """
        exclude_pk = source = None
        if isinstance(query, models.Model):
            vector, source = instance_vector(query, embedding, self.db)
            if query._meta.concrete_model is self.model._meta.concrete_model:
                exclude_pk = query.pk
        elif isinstance(query, str):
            # The version serving on this queryset's database (a replica's own); or asimilar_to()'s
            vector, version = text_vector(query, embedding.encoder, self.db)
            source = self._text_source(query, embedding, version)
        else:
            vector = as_vector(query)
        return self._fitted(vector, embedding), exclude_pk, source

    def _fitted(self, vector: np.ndarray, embedding: EmbeddingField) -> np.ndarray:
        """``vector`` at the field's size: a field with fewer dimensions than its encoder
        (Matryoshka) cuts the encoder's vectors to it and re-normalizes, as its writes did."""
        try:
            return embedding.fit_vectors(vector)
        except ValueError:
            cut = " (or its encoder's wider vectors, cut to that)" if embedding.truncates else ""
            raise ValueError(
                f"The query vector has {len(vector)} dimensions but {self.model._meta.label}."
                f"{embedding.name} holds {embedding.get_dimensions()}{cut}; encode it with encoder "
                f"{embedding.encoder!r}."
            ) from None

    def _text_vector_pending(
        self, text: str, embedding: EmbeddingField
    ) -> tuple[QuerySource, PendingVector, Callable[[], np.ndarray]]:
        """A text query's source now, its vector to ``start()`` encoding in another thread
        (``aio.pending_text_vector``), and a call returning the vector fitted to the field.

        An encode that waits outside the GIL (ONNX Runtime, the query server) is started
        here, in the pool, before any of the search's statements; a torch encode is left to
        the caller, to run while its statement does (``FusedJoin.keyword_rows_ahead``)."""
        pending = pending_text_vector(text, embedding.encoder, self.db)
        if pending.waits_outside_gil:
            pending.start()
        source = self._text_source(text, embedding, pending.version)
        return source, pending, lambda: self._fitted(pending.result(), embedding)

    def _text_source(self, text: str, embedding: EmbeddingField, version: str) -> QuerySource:
        """Where a text's vector came from: ``version`` of the field's encoder on this database."""
        size = embedding.get_dimensions()
        return QuerySource(embedding.encoder, version, str(text), database=self.db, dimensions=size)

    def _searching(
        self,
        embedding: EmbeddingField,
        k: int | None,
        *,
        vector_settings: bool = True,
        ef_search: int | None = None,
        iterative_scan: str | None = None,
    ) -> SemanticQuerySet:
        """Defer the wide columns and attach the per-query settings (k, pgvector options)."""
        qs = self
        _, defer = qs.query.deferred_loading
        if defer:  # not after .only(...): respect an explicit choice of columns
            # The vector is the widest column (~4 KB of text at 384 dimensions) and is rarely
            # read from search results; chain .defer(None) to load it with the rows. The
            # tsvector is as wide as the text it indexes.
            wide = [embedding.attname]
            if embedding.has_keyword_search:
                wide.append(embedding.tsvector_field_name)
            qs = qs.defer(*wide)
        if vector_settings:
            qs._search = SearchOptions.from_settings(
                k=k, ef_search=ef_search, iterative_scan=iterative_scan
            )
        else:
            qs._search = SearchOptions.without_index_settings(k)
        return qs

    def _pinned(self) -> SemanticQuerySet:
        """This queryset on the one database the search reads (query/replicas.py)."""
        return self if self._db is not None else self.using(search_database(self))

    def _embedding_field(self, name: str | None, keyword: bool = False) -> EmbeddingField:
        """The EmbeddingField searched: ``name``, or the model's only one (``keyword``: the
        only one with a full-text column, if several have none)."""
        fields = embedding_fields(self.model)
        label = self.model._meta.label
        if keyword and name is None:
            with_keywords = [f for f in fields if f.has_keyword_search]
            if len(with_keywords) == 1:
                return with_keywords[0]
        if name is not None:
            found = next((f for f in fields if f.name == name), None)
            if found is None:
                known = ", ".join(f.name for f in fields) or "none"
                raise ValueError(f"{label} has no EmbeddingField {name!r} (it has: {known}).")
        elif len(fields) == 1:
            found = fields[0]
        elif not fields:
            raise ValueError(
                f"{label} has no EmbeddingField; add one, e.g. "
                "embedding = EmbeddingField(source=('title', 'body'))."
            )
        else:
            names = ", ".join(repr(f.name) for f in fields)
            raise ValueError(f"{label} has several EmbeddingFields ({names}); pass field=...")
        return check_keyword_search(found) if keyword else found


def as_semantic(queryset: models.QuerySet) -> SemanticQuerySet:
    """``queryset`` as a SemanticQuerySet, so models without SemanticManager can be searched
    (the API's registry and the admin's similar items use it).

    Only a database named with ``.using()`` goes along (``_db``, not ``db``, which is the
    router's choice): a search picks its own, ``SEARCH["DATABASE"]`` first (replicas.py)."""
    if isinstance(queryset, SemanticQuerySet):
        return queryset
    return SemanticQuerySet(model=queryset.model, query=queryset.query.chain(), using=queryset._db)


class SemanticManager(models.Manager.from_queryset(SemanticQuerySet)):  # type: ignore[misc]
    """``objects = SemanticManager()`` gives ``Model.objects.similar_to(...)``."""
