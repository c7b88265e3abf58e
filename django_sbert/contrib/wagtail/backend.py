"""Wagtail's search backend API on django-sbert's index table (docs/wagtail.md).

Writing (index.py): Wagtail calls ``add()`` after a page, snippet, image or document is saved
and ``delete()`` when it is deleted; ``add()`` writes the object's text to its ``SearchEntry``
row, which django-sbert embeds on commit (the sweep embeds any row a lost task missed).
``update_index`` embeds in its own process unless ``"UPDATE_INDEX_EMBEDS": False``.

Reading: ``search()`` ranks the index rows of the objects in the queryset it is given, so every
queryset filter (``live()``, ``descendant_of()``, locale, ``filter_fields``) applies as it is;
``"MODE"`` picks the ranking: ``"vector"`` (cosine, HNSW), ``"keyword"`` (PostgreSQL full text)
or ``"hybrid"`` (both, fused). ``autocomplete()`` (the admin's search boxes) is django-sbert's
``suggest()``: a prefix match fused with the vector of the text typed so far.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector
from django.core.exceptions import FieldDoesNotExist, ImproperlyConfigured
from django.db import models
from modelsearch.backends.base import (
    BaseSearchBackend,
    BaseSearchQueryCompiler,
    BaseSearchResults,
    FilterFieldError,
    SearchFieldError,
)
from modelsearch.query import And, Boost, Fuzzy, MatchAll, Not, Or, Phrase, PlainText
from modelsearch.utils import get_descendants_content_types_pks

from django_sbert.query import KeywordConfig
from django_sbert.query.suggest import prefix_words

from .index import SbertIndex, SbertRebuilder, object_ids
from .models import SearchEntry

MODES = ("vector", "hybrid", "keyword")
OPERATOR_MATCH = {"and": "all", "or": "any"}  # Wagtail's operator -> django-sbert's match
# Autocomplete ranks its prefix matches by meaning from this many characters typed on (vector,
# hybrid); shorter, by the prefix match.
AUTOCOMPLETE_VECTOR_MIN_CHARS = 4


def query_text(query: Any) -> str:
    """The words of a Wagtail query object (``Not`` clauses are left out)."""
    if isinstance(query, Phrase):
        return f'"{query.query_string}"'
    if isinstance(query, (PlainText, Fuzzy)):
        return query.query_string
    if isinstance(query, Boost):
        return query_text(query.subquery)
    if isinstance(query, (And, Or)):
        return " ".join(t for t in (query_text(q) for q in query.subqueries) if t)
    return ""  # MatchAll, Not


class SbertQueryCompiler(BaseSearchQueryCompiler):
    """Keeps the queryset, query and options; ``SbertSearchResults`` runs the search."""

    autocomplete = False
    # order_by_relevance=False keeps the queryset's own order, expressions included: the
    # matching objects are read from the queryset itself.
    HANDLES_ORDER_BY_EXPRESSIONS = True

    def entries(self) -> models.QuerySet:
        """The index rows of the queryset's objects (any filter on it applies), restricted to
        those whose ``fields`` hold the words when ``fields=`` is given."""
        model = self.queryset.model
        return SearchEntry.objects.filter(
            content_type_id__in=get_descendants_content_types_pks(model),
            object_id__in=object_ids(self.objects()),
        )

    def objects(self) -> models.QuerySet:
        """The queryset, restricted to the objects whose ``fields`` hold the query's words."""
        if not self.fields:
            return self.queryset
        words = query_text(self.query)
        columns = self.field_columns()
        if self.autocomplete:
            match, config = prefix_query(words), "simple"
        else:
            config = keyword_config()
            if self.match() == "any":
                words = " or ".join(words.split())
            match = SearchQuery(words, search_type="websearch", config=config)
        vector = SearchVector(*columns, config=config)
        return self.queryset.annotate(_sbert_fields=vector).filter(_sbert_fields=match)

    def field_columns(self) -> list[str]:
        """The model columns ``fields=`` names (Wagtail checked they are search fields)."""
        columns = []
        for name in self.fields:
            try:
                field = self.queryset.model._meta.get_field(name)
            except FieldDoesNotExist:
                field = None
            if field is None or field.is_relation or not field.concrete:
                raise SearchFieldError(
                    f'Cannot search with field "{name}": django-sbert searches fields= only '
                    f"on columns of {self.queryset.model.__name__}; leave fields= out to search "
                    "the whole object.",
                    field_name=name,
                )
            columns.append(field.attname)
        return columns

    def match(self) -> str | None:
        operator = getattr(self.query, "operator", None)
        return OPERATOR_MATCH.get(str(operator).lower()) if operator else None


class SbertAutocompleteQueryCompiler(SbertQueryCompiler):
    autocomplete = True


def keyword_config() -> str:
    """The text search configuration of the index's keyword column (its body's, if per field)."""
    config = SearchEntry._meta.get_field("embedding").keyword_config
    return config if isinstance(config, str) else config.get("body", next(iter(config.values())))


def prefix_query(text: str) -> SearchQuery:
    """Every word of ``text`` as a prefix (``'learn':* & 'pyth':*``), unstemmed."""
    finished, last = prefix_words(text)
    words = [*finished, *([last] if last else [])]
    raw = " & ".join("'" + w.replace("'", "''").replace("\\", "\\\\") + "':*" for w in words)
    return SearchQuery(raw or "''", search_type="raw", config="simple")


Ranked = list[tuple[str, "float | None"]]  # (object id, score), best first


class SbertSearchResults(BaseSearchResults):
    """The queryset's objects in the order of their index rows' ranking.

    Words (and, in keyword mode, a phrase) are ranked in SQL and sliced there. A query built
    of ``And``, ``Or``, ``Not``, ``Boost``, ``MATCH_ALL`` or ``MATCH_NONE`` is matched as sets
    of objects (``Not`` leaves out the objects holding its words, and a ``Phrase`` keeps only
    those holding it, in every mode) and ranked by its positive clauses, the objects its
    words select first (in vector and hybrid modes, where every object matches);
    ``order_by_relevance=False`` keeps the queryset's own order (primary key descending where
    it has none, as Wagtail's backends do).
    """

    supports_facet = True

    @property
    def compiler(self) -> SbertQueryCompiler:
        return self.query_compiler

    # -- matching ----------------------------------------------------------------------------

    def _ranked_entries(self, text: str | None = None, match: str | None = None):
        """The index rows, best first, annotated with ``_sbert_score``."""
        compiler, mode = self.compiler, self.backend.mode
        text = query_text(compiler.query) if text is None else text
        match = compiler.match() if match is None else match
        entries = compiler.entries()
        if mode == "vector":
            ranked = entries.similar_to(text)
            score = "similarity"
        elif mode == "hybrid":
            ranked = entries.hybrid_search(text, keyword=KeywordConfig(match=match))
            score = "score"
        else:
            ranked = entries.keyword_search(text, match=match or "all")
            score = "keyword_score"
        return ranked.annotate(_sbert_score=models.F(score))

    def _all_ids(self) -> set[str]:
        """Every object the mode can match: with a vector (vector, hybrid) or any row."""
        entries = self.compiler.entries()
        if self.backend.mode != "keyword":
            entries = entries.filter(embedding__isnull=False)
        return set(entries.values_list("object_id", flat=True))

    def _keyword_scores(self, query: Any) -> dict[str, float]:
        """object id -> keyword score of the objects holding ``query``'s words (once per
        words and operator: a compound query asks for a clause's holders more than once)."""
        text = query_text(query)
        if not text.strip():
            return {}
        operator = getattr(query, "operator", None)
        match = OPERATOR_MATCH.get(str(operator).lower(), "all") if operator else "all"
        known = self.__dict__.setdefault("_keyword_cache", {})
        if (text, match) not in known:
            ranked = self.compiler.entries().keyword_search(text, match=match)
            count = ranked.count()
            known[text, match] = (
                dict(ranked[:count].values_list("object_id", "keyword_score")) if count else {}
            )
        return known[text, match]

    def _matching(self, query: Any, universe: set[str], *, words: bool = False) -> set[str]:
        """The objects ``query`` matches; ``words`` (under a ``Not``): holding its words."""
        if isinstance(query, MatchAll):
            return universe
        if isinstance(query, Not):
            return universe - self._matching(query.subquery, universe, words=True)
        if isinstance(query, Boost):
            return self._matching(query.subquery, universe, words=words)
        if isinstance(query, And):
            found = universe
            for sub in query.subqueries:
                found = found & self._matching(sub, universe, words=words)
            return found
        if isinstance(query, Or):
            found: set[str] = set()
            for sub in query.subqueries:
                found |= self._matching(sub, universe, words=words)
            return found
        if words or self.backend.mode == "keyword" or isinstance(query, Phrase):
            # A phrase asks for those words in that order: matched as a filter in every mode.
            return set(self._keyword_scores(query)) & universe
        return universe  # vector, hybrid: every object matches, ranked by meaning

    def _keyword_weighted(self, query: Any, weight: float = 1.0) -> dict[str, float]:
        """Keyword mode: each object's score, the sum of its positive clauses' scores times
        their ``Boost``."""
        if isinstance(query, Boost):
            return self._keyword_weighted(query.subquery, weight * float(query.boost))
        if isinstance(query, (And, Or)):
            total: dict[str, float] = {}
            for sub in query.subqueries:
                for key, score in self._keyword_weighted(sub, weight).items():
                    total[key] = total.get(key, 0.0) + score
            return total
        if isinstance(query, (Not, MatchAll)):
            return {}
        return {k: weight * float(v) for k, v in self._keyword_scores(query).items()}

    def _is_plain(self) -> bool:
        """Ranked in SQL: words (a phrase too in keyword mode; in the others a phrase filters,
        so it takes the path of compound queries)."""
        plain = (PlainText, Fuzzy, Phrase) if self.backend.mode == "keyword" else (PlainText, Fuzzy)
        return isinstance(self.compiler.query, plain) and not self.compiler.autocomplete

    def _ranked(self) -> Ranked:
        """Every matching object, best first (ties by primary key): the path of compound
        queries and autocomplete; a plain query is ranked in SQL (``_do_search``)."""
        if hasattr(self, "_ranked_cache"):
            return self._ranked_cache
        compiler = self.compiler
        if compiler.autocomplete:
            ranked = self._autocomplete_ranked()
        else:
            universe = self._all_ids()
            found = self._matching(compiler.query, universe)
            if self.backend.mode == "keyword":
                scores = self._keyword_weighted(compiler.query)
                ranked = sorted(
                    ((key, scores.get(key)) for key in found),
                    key=lambda pair: (-(pair[1] or 0.0), _sort_key(pair[0])),
                )
            elif isinstance(compiler.query, Phrase):
                ranked = self._meaning_order(found)  # the holders of the phrase, by meaning
            else:
                # The objects the query's words select (keyword mode's matches) come first:
                # a compound query is written in words, and ranking by meaning orders within
                # the two groups, never lifting a non-holder above a holder.
                held = self._matching(compiler.query, universe, words=True)
                scores = self._meaning_scores(compiler.query, universe)
                ranked = sorted(
                    ((key, scores.get(key)) for key in found),
                    key=lambda pair: (
                        pair[0] not in held,
                        pair[1] is None,
                        -(pair[1] or 0.0),
                        _sort_key(pair[0]),
                    ),
                )
        self._ranked_cache = ranked
        return ranked

    def _meaning_scores(
        self, query: Any, universe: set[str], weight: float = 1.0
    ) -> dict[str, float]:
        """Vector, hybrid: each object's score for a compound query, the sum of the scores of
        the clauses that match it, each times its ``Boost``. A clause scores an object by its
        rank among the clause's matches by meaning: 1 / rank (vector; not the cosine, whose
        spread is too narrow for a ``Boost`` of 2 to reorder) or the fused score, itself made
        of ranks (hybrid). ``Not`` adds nothing; an ``And`` ranks its clauses among the
        objects it matches, so an object it leaves out gets nothing from it."""
        if isinstance(query, Boost):
            return self._meaning_scores(query.subquery, universe, weight * float(query.boost))
        if isinstance(query, (And, Or)):
            if isinstance(query, And):
                universe = self._matching(query, universe)  # each clause ranks among these
            parts = [self._meaning_scores(sub, universe, weight) for sub in query.subqueries]
            parts = [part for part in parts if part]
            if not parts:
                return {}
            keys = set().union(*parts)
            return {key: sum(part.get(key, 0.0) for part in parts) for key in keys}
        if isinstance(query, (Not, MatchAll)):
            return {}
        text = query_text(query)
        if not text.strip():
            return {}
        matched = self._matching(query, universe)
        operator = getattr(query, "operator", None)
        match = OPERATOR_MATCH.get(str(operator).lower()) if operator else None
        ranked = self._ranked_entries(text, match)
        count = ranked.count()
        if not count:
            return {}
        rows = [
            (key, score)
            for key, score in ranked[:count].values_list("object_id", "_sbert_score")
            if key in matched
        ]
        if self.backend.mode == "hybrid":  # already a sum over ranks (docs/hybrid.md)
            return {key: weight * float(score) for key, score in reversed(rows)}
        keys = dict.fromkeys(key for key, _ in rows)  # best first; a row per object
        return {key: weight / rank for rank, key in enumerate(keys, start=1)}

    def _meaning_order(self, found: set[str]) -> Ranked:
        """``found`` in the order of the mode's ranking of the query's positive words."""
        text = query_text(self.compiler.query)
        order: Ranked = []
        if text.strip():
            ranked = self._ranked_entries(text, self.compiler.match())
            count = ranked.count()
            if count:
                order = [
                    (key, score)
                    for key, score in ranked[:count].values_list("object_id", "_sbert_score")
                    if key in found
                ]
        seen = {key for key, _ in order}
        return order + [(key, None) for key in sorted(found - seen, key=_sort_key)]

    def _autocomplete_ranked(self) -> Ranked:
        """The objects whose autocomplete fields have words starting with the words typed,
        ranked by the prefix match (keyword) or by meaning (vector, hybrid)."""
        compiler = self.compiler
        text = query_text(compiler.query)
        query = prefix_query(text)
        if not prefix_words(text)[0] and prefix_words(text)[1] is None:
            return []
        candidates = (
            compiler.entries()
            .annotate(_sbert_prefix=SearchVector("autocomplete", config="simple"))
            .filter(_sbert_prefix=query)
            .annotate(_sbert_rank=SearchRank(models.F("_sbert_prefix"), query))
            .order_by("-_sbert_rank", "pk")
        )
        pairs = list(candidates.values_list("object_id", "_sbert_rank"))
        if self.backend.mode == "keyword" or len(text.strip()) < AUTOCOMPLETE_VECTOR_MIN_CHARS:
            return [(key, float(rank)) for key, rank in pairs]
        return self._meaning_order({key for key, _ in pairs})

    def _matching_ids(self) -> list[str] | None:
        """Object ids of every match, in no order; None: every object of the queryset
        (``MATCH_ALL``)."""
        compiler = self.compiler
        if isinstance(compiler.query, MatchAll) and not compiler.fields:
            return None
        if compiler.autocomplete:
            return [key for key, _ in self._ranked()]
        if self.backend.mode == "keyword":
            return list(self._matching(compiler.query, self._all_ids(), words=True))
        if self._is_plain():
            return list(self._all_ids())
        return [key for key, _ in self._ranked()]

    # -- results -----------------------------------------------------------------------------

    def _ordered_queryset(self) -> models.QuerySet:
        """order_by_relevance=False: the matching objects in the queryset's own order."""
        compiler = self.compiler
        queryset = compiler.queryset
        ids = self._matching_ids()
        if ids is not None:
            to_python = queryset.model._meta.pk.to_python
            queryset = queryset.filter(pk__in=[to_python(i) for i in ids])
        if not queryset.ordered:
            queryset = queryset.order_by("-pk")
        if self.prefetch_related:
            queryset = queryset.prefetch_related(*self.prefetch_related)
        return queryset

    def _objects(self, pairs: Sequence[tuple[str, float | None]]) -> list[models.Model]:
        """The queryset's objects for (object id, score) pairs, in their order."""
        queryset = self.compiler.queryset
        if self.prefetch_related:
            queryset = queryset.prefetch_related(*self.prefetch_related)
        to_python = queryset.model._meta.pk.to_python
        keys = [(to_python(object_id), score) for object_id, score in pairs]
        found = queryset.order_by().in_bulk([key for key, _ in keys])
        results = []
        for key, score in keys:
            obj = found.get(key)
            if obj is None:
                continue  # deleted, or filtered out, since the rows were ranked
            if self._score_field:
                setattr(obj, self._score_field, None if score is None else float(score))
            results.append(obj)
        return results

    def _do_search(self) -> list[models.Model]:
        compiler = self.compiler
        if compiler.queryset.query.is_empty():
            return []
        if not compiler.order_by_relevance:
            return list(self._ordered_queryset()[self.start : self.stop])
        if isinstance(compiler.query, MatchAll) and not compiler.fields:
            return list(compiler.queryset[self.start : self.stop])
        if not self._is_plain():
            return self._objects(self._ranked()[self.start : self.stop])
        if not query_text(compiler.query).strip():
            return []
        ranked = self._ranked_entries()
        stop = self.start + ranked.count() if self.stop is None else self.stop
        if stop <= self.start:
            return []
        rows = ranked.only("pk", "object_id")[self.start : stop]
        return self._objects([(row.object_id, row._sbert_score) for row in rows])

    def _do_count(self) -> int:
        compiler = self.compiler
        if compiler.queryset.query.is_empty():
            return 0
        if isinstance(compiler.query, MatchAll) and not compiler.fields:
            count = compiler.queryset.count()
        elif not compiler.order_by_relevance:
            count = self._ordered_queryset().count()
        elif not self._is_plain():
            count = len(self._ranked())
        elif not query_text(compiler.query).strip():
            count = 0
        else:
            count = self._ranked_entries().count()
        count = max(count - self.start, 0)
        return count if self.stop is None else min(count, self.stop - self.start)

    def facet(self, field_name: str) -> OrderedDict:
        """{value: how many matching objects have it}, most first (ties by value), for a
        ``FilterField`` (a many-to-many one counts each related object; None: none)."""
        compiler = self.compiler
        field = compiler._get_filterable_field(field_name)
        if field is None:
            raise FilterFieldError(
                f'Cannot facet search results with field "{field_name}". Please add '
                f'index.FilterField("{field_name}") to {compiler.queryset.model.__name__}'
                ".search_fields.",
                field_name=field_name,
            )
        queryset = compiler.queryset.order_by()
        ids = self._matching_ids()
        if ids is not None:
            to_python = queryset.model._meta.pk.to_python
            queryset = queryset.filter(pk__in=[to_python(i) for i in ids])
        counts = (
            queryset.values(field.field_name)
            .annotate(_sbert_count=models.Count("pk", distinct=True))
            .order_by("-_sbert_count")
        )
        return OrderedDict((row[field.field_name], row["_sbert_count"]) for row in counts)


def _sort_key(object_id: str) -> tuple[int, Any]:
    """Ties in primary key order: numbers as numbers."""
    return (0, int(object_id)) if object_id.isdigit() else (1, object_id)


class SbertSearchBackend(BaseSearchBackend):
    """``WAGTAILSEARCH_BACKENDS = {"default": {"BACKEND": "django_sbert.contrib.wagtail",
    "OPTIONS": {"MODE": "hybrid"}}}``; ``MODE`` may also be given at the top level or to
    ``get_search_backend("default", MODE="keyword")`` for one call."""

    query_compiler_class = SbertQueryCompiler
    autocomplete_query_compiler_class = SbertAutocompleteQueryCompiler
    index_class = SbertIndex
    results_class = SbertSearchResults
    rebuilder_class = SbertRebuilder

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(params)
        options = {**params.get("OPTIONS", {}), **params}
        self.mode = str(options.get("MODE", "vector")).lower()
        if self.mode not in MODES:
            raise ImproperlyConfigured(
                f"WAGTAILSEARCH_BACKENDS: MODE must be one of {', '.join(MODES)}, "
                f"not {self.mode!r}."
            )
        encoder = options.get("ENCODER", "default")
        field_encoder = SearchEntry._meta.get_field("embedding").encoder
        if encoder != field_encoder:
            raise ImproperlyConfigured(
                f"WAGTAILSEARCH_BACKENDS: ENCODER {encoder!r} is not the encoder of the index "
                f"table ({field_encoder!r}); name {field_encoder!r} in SBERT['ENCODERS']."
            )
        self.update_index_embeds = bool(options.get("UPDATE_INDEX_EMBEDS", True))

    def get_index_for_model(self, model: type[models.Model]) -> SbertIndex:
        # One index object per backend: the rebuilder's deferral is seen by every model.
        if not hasattr(self, "_index"):
            self._index = self.index_class(self)
        return self._index


SearchBackend = SbertSearchBackend
