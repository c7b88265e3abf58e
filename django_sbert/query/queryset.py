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
* ``hnsw.ef_search``, ``hnsw.iterative_scan`` and ``hnsw.max_scan_tuples`` are set with
  ``set_config(..., is_local => true)`` inside a transaction that also runs the query: a
  ``SET LOCAL`` outside a transaction does nothing (pgvector #675);
* iterative index scans (pgvector >= 0.8) keep scanning until a filtered top-k has k rows;
* with ``relaxed_order`` scans the fetched rows are re-sorted by similarity in Python, since
  the index may return them slightly out of order.
* a text or row search that comes back short because a promotion's switch committed after
  its version was read runs once more, on a copy, with the new version (vectors.py);
* a keyword search ranks at most ``KEYWORD_MAX_ROWS`` matching rows (fusion.CappedMatch), and
  every statement runs under ``STATEMENT_TIMEOUT`` (options.py).

``hybrid_search()`` shares the encoding, the filtering and the index settings with
``similar_to()``; its SQL is described in fusion.py, the full-text pieces in django_sbert.keyword.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from asgiref.sync import sync_to_async
from django.db import connections, models
from django.db.models import Value
from pgvector import Vector

from ..fields import EmbeddingField, embedding_fields
from ..fields.columns import vector_literal
from ..keyword import bm25, tsquery
from ..keyword.column import field_weights
from .aio import PendingVector, encode_text, pending_text_vector
from .binary import reranked
from .fusion import (
    KEYWORDS_INSIDE,
    CappedMatch,
    FusedJoin,
    Fusion,
    KeywordRows,
    fused_annotations,
    fusion_plan,
    prescore_terms,
    served_fusion,
)
from .options import (
    FusionConfig,
    KeywordConfig,
    SearchOptions,
    binary_oversample,
    bm25_settings,
    hybrid_configs,
    keyword_max_df,
    keyword_max_rows,
    keyword_rank,
    match_mode,
    match_share,
    rescored_rows,
    search_options,
)
from .passages import PassageSearch, hybrid_annotations, join_passages, uses_passages
from .replicas import search_database
from .suggest import Suggestion, suggest
from .vectors import (
    QuerySource,
    as_vector,
    cosine_distance,
    instance_vector,
    rebind,
    rebound_for,
    same_version,
    text_vector,
)


@dataclass(frozen=True)
class KeywordPlan:
    """What a keyword search looks for: its terms ``(lexeme, idf, df)``, the BM25 parameters
    (None: the column has no statistics, ts_rank) and the share of rows a candidate's rarest
    words may cover."""

    terms: tuple[tsquery.Term, ...]
    bm25: bm25.Bm25 | None
    match_share: float
    # hybrid_search(): the keyword side's rows, ranked already (fusion.KeywordRows)
    rows: KeywordRows | None = None


class SemanticQuerySet(models.QuerySet):
    """A QuerySet with ``similar_to()``; everything else is plain Django."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._search: SearchOptions | None = None
        # similar_to()'s ordering, to re-sort relaxed_order scans; None for the other searches.
        self._search_ordering: tuple[Any, ...] | None = ()
        # Where the query vector came from (a text or a row), to search again after a switch.
        self._search_source: QuerySource | None = None

    def _clone(self) -> SemanticQuerySet:
        clone = super()._clone()
        clone._search = self._search
        clone._search_ordering = self._search_ordering
        clone._search_source = self._search_source
        return clone

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
        plan = pinned._keyword_plan(embedding, text, match, max_df, rank)
        matches, rank_expression = tsquery.keyword_filter_and_rank(
            embedding.tsvector_field_name,
            text,
            embedding.keyword_config,
            match,
            plan.terms,
            plan.bm25,
            plan.match_share,
        )
        if isinstance(matches, tsquery.Matches):
            # Rank at most KEYWORD_MAX_ROWS of the matching rows, however common the words;
            # BM25: the exact score for the best of them by a quick score only.
            by_bm25 = plan.bm25 is not None
            matches = CappedMatch(
                matches,
                max_rows,
                prescore=prescore_terms(plan.terms, match, plan.match_share) if by_bm25 else None,
                keep=rescored_rows(k),
                tsvector_column=embedding.tsvector_field_name,
                require_condition=match == "all",
            )
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
        if any(isinstance(join, FusedJoin) for join in self.query.alias_map.values()):
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
        # The text is encoded in another thread while PostgreSQL ranks the keyword side.
        source, pending, wait = (None, None, None)
        if text.strip():
            source, pending, wait = qs._text_vector_pending(text, embedding)
        chosen = served_fusion(given, source)
        text = str(text)  # ahybrid_search() passes an EncodedText: from here on, the words
        fusion = fusion_plan(embedding, text, chosen, str(keyword.match), source)
        if wait is None:
            qs = qs.none()
        else:
            plan = qs._keyword_plan(
                embedding, text, fusion.match, keyword.max_df, keyword.rank, fusion, pending.start
            )
            fusion = replace(
                fusion,
                terms=plan.terms,
                bm25=plan.bm25,
                match_share=plan.match_share,
                keyword_rows=plan.rows,
            )
            literal = vector_literal(wait())
            search = None
            if uses_passages(embedding, text, passages):
                search = PassageSearch.for_field(embedding, literal, source)  # query/passages.py
            fusion = replace(
                fusion,
                vector_literal=literal,
                passages=search,
                binary=self._binary_vector_side(embedding, literal, source, fusion.candidates),
            )
        qs = qs._fused(fusion, embedding, encoded=wait is not None)
        qs = qs._searching(embedding, k=k, ef_search=ef_search, iterative_scan=iterative_scan)
        qs._search_ordering = None
        qs._search_source = fusion.source
        return qs

    def _fused(self, fusion: Fusion, embedding: EmbeddingField, encoded: bool) -> SemanticQuerySet:
        """This queryset joined to ``fusion``'s table, annotated and ranked by its score
        (``encoded``: the text has a vector, so rows get a similarity)."""
        source, literal = fusion.source, fusion.vector_literal
        parent = self.query.get_initial_alias()
        alias = self.query.join(FusedJoin(fusion, self.model._meta.pk.column, parent))
        annotations: dict[str, Any] = dict(fused_annotations(alias))
        annotations["similarity"] = Value(None, output_field=models.FloatField())
        if encoded:
            # A row found by its words alone may still carry another version's vector (a
            # switch in progress): it gets no similarity rather than a meaningless one.
            annotations["similarity"] = models.Case(
                models.When(
                    models.Q(**same_version(embedding, source)),
                    then=1.0 - cosine_distance(embedding, literal, source),
                ),
                default=None,
                output_field=models.FloatField(),
            )
        if fusion.passages is not None:  # similarity and passage of each row's best passage
            same = models.Q(**same_version(embedding, source))
            annotations.update(hybrid_annotations(fusion.passages, same))
        return self.annotate(**annotations).order_by(models.F("score").desc(), "pk")

    def suggest(
        self, text: str, k: int | None = None, field: str | None = None, **options: Any
    ) -> list[Suggestion]:
        """Search-as-you-type: up to ``k`` rows for the text typed so far, best first.

        A prefix match of the words on the keyword column (the last, unfinished word as a
        prefix) fused with a vector search of the text; a text shorter than
        ``suggest.VECTOR_MIN_CHARS`` (4) is answered by the prefix match alone, one
        shorter than ``suggest.MIN_CHARS`` (2) by nothing. Returns ``Suggestion``s
        (``pk``, ``label``, ``url``, ``score``, ``keyword_rank``, ``vector_rank``,
        ``object``), not a queryset: query/suggest.py, docs/hybrid.md.
        """
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
            encoder = qs._embedding_field(field, keyword=True).encoder
            text = await encode_text(text, encoder, qs.db)
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
        exclude_pk = None
        source = None
        if isinstance(query, models.Model):
            vector, source = instance_vector(query, embedding, self.db)
            if query._meta.concrete_model is self.model._meta.concrete_model:
                exclude_pk = query.pk
        elif isinstance(query, str):
            # The version serving on this queryset's database (a replica's own); or asimilar_to()'s
            vector, version = text_vector(query, embedding.encoder, self.db)
            source = QuerySource(
                encoder=embedding.encoder,
                version=version,
                text=str(query),
                database=self.db,
                dimensions=embedding.get_dimensions(),
            )
        else:
            vector = as_vector(query)
        return self._fitted(vector, embedding), exclude_pk, source

    def _fitted(self, vector: np.ndarray, embedding: EmbeddingField) -> np.ndarray:
        """``vector`` at the field's size: a field with fewer dimensions than its encoder
        (Matryoshka) cuts the encoder's vectors to it and re-normalizes, as its writes did."""
        try:
            return embedding.fit_vectors(vector)
        except ValueError:
            dimensions = embedding.get_dimensions()
            cut = " (or its encoder's wider vectors, cut to that)" if embedding.truncates else ""
            raise ValueError(
                f"The query vector has {len(vector)} dimensions but {self.model._meta.label}."
                f"{embedding.name} holds {dimensions}{cut}; encode it with encoder "
                f"{embedding.encoder!r}."
            ) from None

    def _text_vector_pending(
        self, text: str, embedding: EmbeddingField
    ) -> tuple[QuerySource, PendingVector, Callable[[], np.ndarray]]:
        """A text query's source now, its vector to ``start()`` encoding in another thread
        (``aio.pending_text_vector``), and a call returning the vector fitted to the field."""
        pending = pending_text_vector(text, embedding.encoder, self.db)
        source = QuerySource(
            encoder=embedding.encoder,
            version=pending.version,
            text=str(text),
            database=self.db,
            dimensions=embedding.get_dimensions(),
        )
        return source, pending, lambda: self._fitted(pending.result(), embedding)

    def _binary_vector_side(
        self,
        embedding: EmbeddingField,
        literal: str,
        source: QuerySource | None,
        candidates: int,
    ) -> tuple[Any, Any] | None:
        """hybrid_search()'s vector side on a field with ``binary_index=True``: its top
        ``candidates`` come from ``candidates x oversample`` rows by Hamming distance."""
        oversample = binary_oversample(embedding, None)
        if oversample is None:
            return None
        return reranked(embedding, literal, source, oversample, candidates * oversample)

    def _keyword_plan(
        self,
        embedding: EmbeddingField,
        text: str,
        match: str,
        max_df: float | None,
        rank: str | None = None,
        fusion: Fusion | None = None,
        before_ranking: Callable[[], None] | None = None,
    ) -> KeywordPlan:
        """The words of ``text`` to search for and how to rank them (one query, under the
        statement timeout like the search). BM25: ``(lexeme, idf, df)`` from the column's
        exact statistics, for either match; where the column has none (its triggers could
        not be installed): the terms of tsquery.query_terms for match="any", () for
        match="all".

        With ``fusion`` (hybrid_search(): the fused table's settings, its terms still to come)
        the plan also carries the keyword side's rows, ranked in the same transaction;
        ``before_ranking`` is called once their statement is compiled, just before it runs.
        """
        keyword_rank(rank)  # checked: BM25 is the one ranking
        if not text.strip():
            return KeywordPlan((), None, tsquery.MATCH_DF)
        connection = connections[self.db]
        with search_options(self.db, SearchOptions.without_index_settings(), pipelined=True):
            plan = self._keyword_terms(embedding, text, match, max_df, connection)
            if fusion is None:
                return plan
            fused = replace(fusion, terms=plan.terms, bm25=plan.bm25, match_share=plan.match_share)
            join = FusedJoin(fused, self.model._meta.pk.column, self.query.get_initial_alias())
            rows = join.keyword_rows_ahead(self.query, connection, before_ranking)
            return replace(plan, rows=rows)

    def _keyword_terms(
        self,
        embedding: EmbeddingField,
        text: str,
        match: str,
        max_df: float | None,
        connection: Any,
    ) -> KeywordPlan:
        """_keyword_plan()'s terms and parameters, in the caller's transaction."""
        max_df = keyword_max_df(max_df)
        table = self.model._meta.db_table
        column = self.model._meta.get_field(embedding.tsvector_field_name).column
        configs = tsquery.query_configs(embedding.keyword_config)
        sources = embedding._keyword_source_fields(self.model) or ()
        terms, parameters = tsquery.bm25_terms(
            connection,
            bm25.relation_key(table, column),
            configs,
            text,
            max_df if match == "any" else 1.0,
            field_weights(sources, embedding.keyword_weights),
            **bm25_settings(),
        )
        if parameters is not None:
            return KeywordPlan(terms, parameters, match_share(parameters.rows))
        if match != "any":
            return KeywordPlan((), None, tsquery.MATCH_DF)
        terms = tsquery.query_terms(connection, table, column, configs[0], text, max_df)
        return KeywordPlan(terms, None, tsquery.MATCH_DF)

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
        fields = embedding_fields(self.model)
        label = self.model._meta.label
        if keyword and name is None:
            with_keywords = [f for f in fields if f.has_keyword_search]
            if len(with_keywords) == 1:
                return with_keywords[0]
        if name is not None:
            for candidate in fields:
                if candidate.name == name:
                    return _check_keyword_search(candidate) if keyword else candidate
            known = ", ".join(f.name for f in fields) or "none"
            raise ValueError(f"{label} has no EmbeddingField {name!r} (it has: {known}).")
        if len(fields) == 1:
            return _check_keyword_search(fields[0]) if keyword else fields[0]
        if not fields:
            raise ValueError(
                f"{label} has no EmbeddingField; add one, e.g. "
                "embedding = EmbeddingField(source=('title', 'body'))."
            )
        names = ", ".join(repr(f.name) for f in fields)
        raise ValueError(f"{label} has several EmbeddingFields ({names}); pass field=...")

    # -- execution ---------------------------------------------------------------------------

    @contextmanager
    def _running(self, *, pipelined: bool = False) -> Iterator[None]:
        """Run the block with ``k`` applied and this search's pgvector settings.

        ``k`` caps the rows only while the statement runs: the queryset's own limits are put
        back afterwards, so after evaluation it can still be filtered, counted or sliced like
        any queryset. ``pipelined``: the block fetches its rows whole on ordinary cursors, so
        the transaction's start, the settings and the statement may share a round trip
        (``search_options``).
        """
        assert self._search is not None
        query = self.query
        limits = (query.low_mark, query.high_mark)
        if self._search.k is not None and query.high_mark is None:
            query.set_limits(high=int(self._search.k))  # relative to an offset, if any
        try:
            with search_options(self.db, self._search, pipelined=pipelined):
                yield
        finally:
            query.low_mark, query.high_mark = limits

    def _fetch_all(self) -> None:
        if self._search is None or self._result_cache is not None:
            return super()._fetch_all()
        with self._running(pipelined=True):  # rows fetched whole, on a client-side cursor
            super()._fetch_all()
        if self._came_back_short(self._result_cache):
            retry = self._after_switch()
            if retry is not None:
                retry._fetch_all()
                self._result_cache = retry._result_cache
                self._prefetch_done = retry._prefetch_done
        if self._search.iterative_scan == "relaxed_order" and self._ordered_by_distance():
            self._result_cache = _resorted(self._result_cache)

    def _ordered_by_distance(self) -> bool:
        """Still ordered nearest first, as similar_to() left it (not re-ordered or reversed)."""
        return (
            self._search_ordering is not None
            and self.query.standard_ordering
            and self.query.order_by == self._search_ordering
        )

    # A search by a text or a row compares only rows of its vector's encoder version. When a
    # promotion's switch commits between reading that version and running the statement,
    # every row already carries the new one, and the search finds (almost) nothing. So a
    # result that came back short is checked: if the version moved on, the search runs once
    # more, on a copy of this queryset whose SQL carries the new version and its vector.

    def _came_back_short(self, rows: list[Any]) -> bool:
        """Fewer rows than asked for (a slice, or ``k``), or, for a hybrid search, none from
        the vector side (or no way to tell, e.g. ``values_list()``)."""
        if self._search_source is None:
            return False
        query = self.query
        if query.high_mark is not None:
            expected: int | None = query.high_mark - query.low_mark
        else:
            expected = None if self._search.k is None else int(self._search.k)
        if not rows or (expected is not None and len(rows) < expected):
            return True
        return self._is_hybrid() and all(_vector_rank(row) is None for row in rows)

    def _after_switch(self) -> SemanticQuerySet | None:
        """A copy of this search bound to the version its rows moved on to, if they did since
        the query vector was read; None otherwise, and for a copy that is already bound."""
        source = self._search_source
        if source is None or rebound_for(self.query, source) is not None:
            return None  # a vector passed in, or the retry itself: once is enough
        rebound = source.moved()
        if rebound is None:
            return None
        retry = self._chain()
        rebind(retry.query, source, rebound)
        return retry

    def _is_hybrid(self) -> bool:
        return any(isinstance(join, FusedJoin) for join in self.query.alias_map.values())

    def iterator(self, chunk_size: int | None = None) -> Iterator[Any]:
        if self._search is None:
            yield from super().iterator(chunk_size)
            return
        if self._is_hybrid():
            # At most 2 * candidates rows: fetched whole, so that the vector side can be
            # checked before any row is handed out.
            rows = self._chain()
            rows._fetch_all()
            yield from rows._result_cache
            return
        found = False
        with self._running():
            for row in super().iterator(chunk_size):
                found = True
                yield row
        retry = None if found else self._after_switch()
        if retry is not None:
            yield from retry.iterator(chunk_size)

    def explain(self, *, format: str | None = None, **options: Any) -> str:
        if self._search is None:
            return super().explain(format=format, **options)
        qs = self
        if self._is_hybrid():  # the whole search in one plan, its keyword side included
            qs = self._chain()
            setattr(qs.query, KEYWORDS_INSIDE, True)
        with qs._running():
            return super(SemanticQuerySet, qs).explain(format=format, **options)

    def count(self) -> int:
        if self._search is None or self._result_cache is not None:
            return super().count()
        with search_options(self.db, self._search):  # a hybrid count runs the index scans
            count = super().count()
        retry = self._after_switch() if count == 0 else None
        return count if retry is None else retry.count()

    def exists(self) -> bool:
        if self._search is None or self._result_cache is not None:
            return super().exists()
        with search_options(self.db, self._search):
            found = super().exists()
        retry = None if found else self._after_switch()
        return found if retry is None else retry.exists()

    def aggregate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if self._search is None:
            return super().aggregate(*args, **kwargs)
        with search_options(self.db, self._search):  # over every matching row, like count()
            return super().aggregate(*args, **kwargs)

    async def aiterator(self, chunk_size: int = 2000) -> AsyncIterator[Any]:
        if self._search is None:
            async for row in super().aiterator(chunk_size):
                yield row
            return
        # Django's aiterator() would bypass k and the search's settings and timeout. Nor can
        # rows be streamed: the settings live in a transaction, which would stay open across
        # awaits while other coroutines' queries run on the same connection. So the (bounded:
        # k or a slice) rows are fetched in one thread-sensitive call, exactly as `async for`
        # does: re-sorted after a relaxed_order scan, prefetched, retried after a switch.
        rows = self._chain()
        await sync_to_async(rows._fetch_all)()
        for row in rows._result_cache:
            yield row


def _check_keyword_search(field: EmbeddingField) -> EmbeddingField:
    if field.has_keyword_search:
        return field
    raise ValueError(
        f"{field.model._meta.label}.{field.name} has no full-text column: declare it with "
        f"EmbeddingField(..., keyword_search=True) and run makemigrations and migrate "
        f"(it adds the generated column {field.tsvector_field_name} and its GIN index)."
    )


def _vector_rank(row: Any) -> Any:
    """A hybrid result row's ``vector_rank``: None when absent or not carried (values_list)."""
    return row.get("vector_rank") if isinstance(row, dict) else getattr(row, "vector_rank", None)


def _resorted(rows: list[Any]) -> list[Any]:
    """Sort rows by descending similarity when each carries it (instances or dicts)."""

    def key(row: Any) -> float | None:
        value = row.get("similarity") if isinstance(row, dict) else getattr(row, "similarity", None)
        return None if value is None else -float(value)

    keys = [key(row) for row in rows]
    if not rows or any(k is None for k in keys):
        return rows
    order = sorted(range(len(rows)), key=keys.__getitem__)  # stable: ties keep index order
    return [rows[i] for i in order]


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
