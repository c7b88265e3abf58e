"""Wagtail's search backend API on django-sbert's index table (docs/wagtail.md).

Writing: Wagtail calls ``add()`` after a page, snippet, image or document is saved (publish,
unpublish, edits) and ``delete()`` when it is deleted. ``add()`` writes the object's text to
its ``SearchEntry`` row; django-sbert's ``post_save`` handler then sends the row to the embed
task when the transaction commits, and the sweep embeds any row a lost task missed.
``update_index`` writes the rows in bulk and embeds the stale ones in its own process, with
progress, unless the backend says ``"UPDATE_INDEX_EMBEDS": False`` (then the worker does).

Reading: ``search()`` ranks the index rows of the objects in the queryset it is given, so every
queryset filter (``live()``, ``descendant_of()``, locale, ``filter_fields``) applies as it is;
``"MODE"`` picks the ranking: ``"vector"`` (cosine, HNSW), ``"keyword"`` (PostgreSQL full text)
or ``"hybrid"`` (both, fused). ``autocomplete()`` (the admin's search boxes) is django-sbert's
``suggest()``: a prefix match fused with the vector of the text typed so far.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.db.models.functions import Cast
from modelsearch.backends.base import (
    BaseIndex,
    BaseSearchBackend,
    BaseSearchQueryCompiler,
    BaseSearchResults,
    get_model_root,
)
from modelsearch.index import get_indexed_models
from modelsearch.query import And, Boost, Fuzzy, MatchAll, Not, Or, Phrase, PlainText
from modelsearch.utils import get_descendants_content_types_pks

from django_sbert.indexing import embed_stale, get_ref
from django_sbert.indexing.signals import schedule
from django_sbert.query import KeywordConfig
from django_sbert.query.suggest import prefix_matches

from .entries import entry_texts
from .models import SearchEntry

MODES = ("vector", "hybrid", "keyword")
OPERATOR_MATCH = {"and": "all", "or": "any"}  # Wagtail's operator -> django-sbert's match
AUTOCOMPLETE_LIMIT = 100  # rows an unsliced autocomplete() ranks


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


def _pk_type(model: type[models.Model]) -> models.Field:
    """A field of the type of ``model``'s primary key column (a page's is its parent's id)."""
    field = model._meta.pk
    while field.is_relation:
        field = field.target_field
    if isinstance(field, (models.AutoField, models.BigAutoField, models.IntegerField)):
        return models.BigIntegerField()
    if isinstance(field, models.UUIDField):
        return models.UUIDField()
    return models.CharField()


def object_ids(queryset: models.QuerySet) -> models.QuerySet:
    """The queryset's primary keys as the text ``SearchEntry.object_id`` holds (a subquery)."""
    return (
        queryset.order_by()
        .annotate(_sbert_object_id=Cast("pk", models.CharField()))
        .values("_sbert_object_id")
    )


class SbertIndex(BaseIndex):
    """The one index: the ``SearchEntry`` table, for every indexed model."""

    def __init__(self, backend: SbertSearchBackend) -> None:
        super().__init__(backend)
        self.defer_embedding = False  # update_index embeds in finish(), not through tasks

    def reset(self) -> None:
        SearchEntry.objects.all().delete()

    def add_item(self, obj: models.Model) -> None:
        """One object (a save): ``update_or_create`` sends ``post_save``, whose handler sends
        the row to the embed task on commit, only when its text changed."""
        texts = entry_texts(obj)
        SearchEntry.objects.update_or_create(
            content_type=ContentType.objects.get_for_model(type(obj)),
            object_id=str(obj.pk),
            defaults=texts,
        )

    def add_items(self, model: type[models.Model], items: Iterable[models.Model]) -> None:
        """Many objects (``update_index``, ``add_bulk``): one upsert, no signals, so the rows
        are scheduled here (the embed task skips those whose text and version are current)."""
        if not model.get_search_fields():
            return
        content_type = ContentType.objects.get_for_model(model)
        rows = [
            SearchEntry(content_type=content_type, object_id=str(obj.pk), **entry_texts(obj))
            for obj in items
        ]
        if not rows:
            return
        written = SearchEntry.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["content_type", "object_id"],
            update_fields=["title", "body", "autocomplete"],
        )
        if self.defer_embedding:
            return
        using = SearchEntry.objects.db
        for row in written:
            schedule(SearchEntry._meta.label, "embedding", row.pk, using)

    def delete_item(self, item: models.Model) -> None:
        SearchEntry.objects.filter(
            content_type_id__in=get_descendants_content_types_pks(get_model_root(type(item))),
            object_id=str(item.pk),
        ).delete()

    def delete_stale_entries(self) -> int:
        """Delete the rows of objects that no longer exist; returns how many."""
        deleted = 0
        for model in get_indexed_models():
            if model._meta.parents:
                continue  # a child's rows go with its root model's
            deleted += (
                SearchEntry.objects.filter(
                    content_type_id__in=get_descendants_content_types_pks(model)
                )
                .exclude(object_id__in=object_ids(model._default_manager.all()))
                .delete()[0]
            )
        return deleted


class SbertRebuilder:
    """``update_index``: drop the rows of deleted objects, write every object's row, then
    embed the stale rows here with progress (or leave them to the worker)."""

    def __init__(self, index: SbertIndex) -> None:
        self.index = index

    def start(self) -> SbertIndex:
        self.index.defer_embedding = self.index.backend.update_index_embeds
        self.index.delete_stale_entries()
        return self.index

    def finish(self) -> None:
        ref = get_ref(SearchEntry._meta.label, "embedding")
        if not self.index.defer_embedding:
            return  # each chunk was scheduled for the worker as it was written
        done = [0]

        def progress(rows: int) -> None:
            done[0] += rows
            sys.stdout.write(f"django-sbert: embedded {done[0]} rows\n")
            sys.stdout.flush()

        embed_stale(ref, progress=progress)
        self.index.defer_embedding = False


class SbertQueryCompiler(BaseSearchQueryCompiler):
    """Keeps the queryset, query and options; ``SbertSearchResults`` runs the search."""

    autocomplete = False

    def entries(self) -> models.QuerySet:
        """The index rows of the queryset's objects (any filter on it applies)."""
        model = self.queryset.model
        return SearchEntry.objects.filter(
            content_type_id__in=get_descendants_content_types_pks(model),
            object_id__in=object_ids(self.queryset),
        )

    def match(self) -> str | None:
        operator = getattr(self.query, "operator", None)
        return OPERATOR_MATCH.get(str(operator).lower()) if operator else None


class SbertAutocompleteQueryCompiler(SbertQueryCompiler):
    autocomplete = True


class SbertSearchResults(BaseSearchResults):
    """The queryset's objects in the order of their index rows' ranking."""

    supports_facet = False

    @property
    def compiler(self) -> SbertQueryCompiler:
        return self.query_compiler

    def _ranked_entries(self) -> models.QuerySet:
        """The index rows, best first, annotated with ``_sbert_score``."""
        compiler, mode = self.compiler, self.backend.mode
        text = query_text(compiler.query)
        entries = compiler.entries()
        if mode == "vector":
            ranked = entries.similar_to(text)
            score = "similarity"
        elif mode == "hybrid":
            ranked = entries.hybrid_search(text, keyword=KeywordConfig(match=compiler.match()))
            score = "score"
        else:
            ranked = entries.keyword_search(text, match=compiler.match() or "all")
            score = "keyword_score"
        return ranked.annotate(_sbert_score=models.F(score))

    def _matching_ids(self) -> list[str]:
        """Object ids of every matching row (``order_by_relevance=False``: the queryset's
        own order). In vector and hybrid modes every row with a vector matches."""
        compiler = self.compiler
        if self.backend.mode == "keyword":
            ranked = self._ranked_entries()
            return list(ranked[: self._unsliced_count(ranked)].values_list("object_id", flat=True))
        entries = compiler.entries().filter(embedding__isnull=False)
        return list(entries.values_list("object_id", flat=True))

    @staticmethod
    def _unsliced_count(ranked: models.QuerySet) -> int:
        return max(ranked.count(), 1)

    def _autocomplete_entries(self, limit: int) -> list[tuple[Any, float | None]]:
        """(entry pk, score) for the text typed so far, best first."""
        compiler = self.compiler
        text = query_text(compiler.query)
        entries = compiler.entries()
        if self.backend.mode == "keyword":
            field = SearchEntry._meta.get_field("embedding")
            return [(pk, None) for pk in prefix_matches(entries, field, text, limit)]
        return [(s.pk, s.score) for s in entries.suggest(text, k=limit, candidates=limit)]

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
                setattr(obj, self._score_field, score)
            results.append(obj)
        return results

    def _do_search(self) -> list[models.Model]:
        compiler = self.compiler
        if isinstance(compiler.query, MatchAll):
            return list(compiler.queryset[self.start : self.stop])
        if isinstance(compiler.query, Not) and isinstance(compiler.query.subquery, MatchAll):
            return []
        if compiler.autocomplete:
            pairs = self._autocomplete_pairs()
            return self._objects(pairs[self.start : self.stop])
        if not compiler.order_by_relevance:
            ids = self._matching_ids()
            queryset = compiler.queryset.filter(
                pk__in=[compiler.queryset.model._meta.pk.to_python(i) for i in ids]
            )
            return list(queryset[self.start : self.stop])
        ranked = self._ranked_entries()
        stop = self.stop if self.stop is not None else self.start + self._unsliced_count(ranked)
        rows = ranked.only("pk", "object_id")[self.start : stop]
        return self._objects([(row.object_id, row._sbert_score) for row in rows])

    def _autocomplete_pairs(self) -> list[tuple[str, float | None]]:
        limit = self.stop if self.stop is not None else AUTOCOMPLETE_LIMIT
        scored = self._autocomplete_entries(max(limit, 1))
        ids = SearchEntry.objects.in_bulk([pk for pk, _ in scored])
        return [(ids[pk].object_id, score) for pk, score in scored if pk in ids]

    def _do_count(self) -> int:
        compiler = self.compiler
        if isinstance(compiler.query, MatchAll):
            return compiler.queryset.count()
        if isinstance(compiler.query, Not) and isinstance(compiler.query.subquery, MatchAll):
            return 0
        if compiler.autocomplete:
            count = len(self._autocomplete_pairs())
        elif not compiler.order_by_relevance:
            count = len(self._matching_ids())
        else:
            count = self._ranked_entries().count()
        count = max(count - self.start, 0)
        return count if self.stop is None else min(count, self.stop - self.start)


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
