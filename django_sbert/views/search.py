"""A search page: ``SearchView`` (a ``ListView``), and ``AsyncSearchView`` for ASGI sites.

::

    # views.py
    class ArticleSearch(SearchView):
        model = Article                      # or queryset = Article.objects.filter(...)
        modes = ("hybrid", "vector")         # the first is the default

    # urls.py
    path("search/", ArticleSearch.as_view(), name="search")

docs/howto/search-page.md describes what a request goes through: the form, the filters, the
``max_pages`` bound (404 before anything is encoded), the search, highlighting, the search log,
503 when the database or the encoder cannot answer now, and 429 past
``SBERT["RATES"]["search"]`` (counted with the REST API's searches).

``AsyncSearchView`` encodes in the async searches' pool of threads (``query/aio.py``), never on
the event loop, and runs the same hooks (``filter_queryset()``, ``search()``,
``get_context_data()``) in Django's thread, so one override serves both views.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from time import perf_counter
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.core.paginator import Page
from django.db import models
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils.translation import gettext as _
from django.views.generic import ListView

from ..encoder.sentences import sentence_spans
from ..exceptions import EncoderAway, ServiceUnavailable
from ..feedback import log_search, logging_on, write_after_response
from ..fields import EmbeddingField, embedding_fields
from ..query import SemanticQuerySet, as_semantic
from ..query.aio import encode_text
from ..query.fallback import DEGRADED, from_keywords
from ..query.highlight import highlight_hits
from ..query.replicas import search_database
from ..query.vectors import EncodedText
from ..serving import encode_query_for, peek_query_cache, serving_record
from ..throttling import rate, rate_setting, throttle_wait
from .forms import MODES, SearchForm

logger = logging.getLogger(__name__)

VECTOR, KEYWORD, HYBRID = "vector", "keyword", "hybrid"
# Sentences highlighting encodes for one page at most (ten passages of ~200 tokens are ~80):
# the rows past them show their passage without a mark, so a page costs a bounded encode.
MAX_HIGHLIGHT_SENTENCES = 200
TEXT_MODES = (HYBRID, KEYWORD)  # the modes that need the field's full-text column


@dataclass(frozen=True)
class SearchTiming:
    """How long a search took in this process: encoding the query (None when nothing was
    encoded: a keyword search, or a search by a row's stored vector; ``cached`` when this
    process had encoded the same text before) and the database query, fetching the rows."""

    encode_ms: float | None
    query_ms: float
    cached: bool = False

    @property
    def total_ms(self) -> float:
        return (self.encode_ms or 0.0) + self.query_ms


class SearchView(ListView):
    """``?q=`` searched in ``?mode=``, ranked, paginated to a bounded depth, highlighted.

    The context it adds to ListView's is listed in docs/howto/search-page.md.
    """

    model: type[models.Model] | None = None
    queryset: models.QuerySet | None = None
    # The EmbeddingField searched; None: the model's only one.
    field: str | None = None
    # Modes the page offers, in the order the switch shows them; default_mode None: the first.
    modes: Sequence[str] = MODES
    default_mode: str | None = None
    # keyword_search()'s match in keyword mode: "all" words (a search box's habit) or "any".
    keyword_match: str = "all"
    paginate_by = 10
    # Pages a search can show: ?page= beyond is a 404, and one query fetches at most
    # paginate_by * max_pages rows.
    max_pages = 10
    # Vector mode: rows less similar are left out. Hybrid mode: rows only the vector side
    # found are left out below it; keyword matches stay.
    min_similarity: float | None = None
    # A django_filters.FilterSet over the model, fed request.GET; None: filter_queryset().
    filterset_class: type | None = None
    form_class: type[SearchForm] = SearchForm
    template_name = "django_sbert/search.html"
    # The template search.html extends: it must have the blocks "title" and "content".
    base_template = "django_sbert/base.html"
    # The search box's placeholder text, e.g. an example query; None: none.
    placeholder: str | None = None
    # A URL name answering search-as-you-type suggestions; None: the box suggests nothing.
    suggest_url: str | None = None
    # Characters of a result's passage shown by the default template.
    snippet_chars = 300
    # The scope of SBERT["RATES"] searches are counted in (with the REST API's
    # search/ and similar/); None: this page is not throttled. Staff users never are.
    throttle_scope: str | None = "search"

    form: SearchForm
    query: str = ""
    mode: str = ""
    search_for: str | models.Model | None = None
    timing: SearchTiming | None = None
    unavailable: bool = False
    degraded: str = ""  # "keyword": the encoder was away, the rows matched by words
    retry_after: int | None = None  # a 503's Retry-After
    filterset: Any = None
    search_source: SemanticQuerySet
    search_log: Any = None  # the SearchLog of this request's search, when it was logged
    served_version: str | None = None  # the encoder version the query was encoded with

    # -- the request ---------------------------------------------------------------------------

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        prepared = self.prepare()
        if prepared is not None:
            return prepared
        if self.search_for is not None:
            try:
                self.object_list, self.timing = self.fetch(self.search_source)
            except ServiceUnavailable as exc:
                self.not_now(exc)
        context = self.get_context_data()
        self.highlight(context["page_obj"])
        self.log_page(context)
        return write_after_response(request, self.searched_response(context))

    def searched_response(self, context: dict[str, Any]) -> HttpResponse:
        """The page: 200, or 503 with ``Retry-After`` when the search could not run now."""
        response = self.render_to_response(context, status=503 if self.unavailable else 200)
        if self.unavailable and self.retry_after:
            response["Retry-After"] = str(self.retry_after)
        return response

    def prepare(self) -> HttpResponse | None:
        """Everything before the search (it may read the database: a filter's choices, a row
        to search by): the form, the queryset and the page bound. A response when the form
        is invalid, else None."""
        self.check_configuration()
        self.form = self.get_form()
        self.object_list = []
        self.search_source = self.filter_queryset(self.get_queryset())
        if not self.form.is_valid():
            self.mode = self.form.default_mode
            context = self.get_context_data()
            return self.render_to_response(context, status=400)
        self.query = self.form.cleaned_data["q"]
        self.mode = self.form.cleaned_data["mode"]
        self.search_for = self.get_search_query()
        if self.search_for is not None:
            wait = self.throttled()
            if wait is not None:
                return self.too_many(wait)
            self.check_page()
            # Rows and serving version from one database (a read replica, query/replicas.py).
            self.search_source = self.search_source.using(search_database(self.search_source))
        return None

    def throttled(self) -> int | None:
        """Seconds this client must wait before searching again, or None (and the search
        counted): ``throttle_scope``'s rate per client, staff users left out."""
        user = getattr(self.request, "user", None)
        if self.throttle_scope is None or (user is not None and user.is_active and user.is_staff):
            return None
        scope = self.throttle_scope
        # The cache key of the API's throttle of that scope (api/throttling.py): one count.
        return throttle_wait(
            self.request, rate(scope), f"sbert-throttle:{scope}", rate_setting(scope)
        )

    def too_many(self, wait: int) -> HttpResponse:
        """429 with the page's notice and ``Retry-After``: nothing encoded or searched."""
        logger.info("%s: a client is over its search rate", type(self).__name__)
        self.search_for, self.unavailable = None, True
        response = self.render_to_response(self.get_context_data(), status=429)
        response["Retry-After"] = str(wait)
        return response

    def fetch(self, queryset: SemanticQuerySet) -> tuple[list[models.Model], SearchTiming]:
        """The top ``paginate_by * max_pages`` rows for ``search_for``, and how long it took."""
        started = perf_counter()
        try:
            target, cached = self.encode(queryset, self.search_for)
        except EncoderAway as away:  # the host's query server is away (the light layout)
            rows = list(self.by_words(queryset, away)[: self.result_limit()])
            return rows, self._timing(None, False, started, started)
        encoded = perf_counter()
        self.served_version = getattr(target, "version", None)
        ranked = self.search(queryset, target, self.mode)
        rows = list(ranked[: self.result_limit()])
        return rows, self._timing(target, cached, started, encoded)

    def by_words(self, queryset: SemanticQuerySet, away: EncoderAway) -> SemanticQuerySet:
        """The text's keyword search, the page marked ``degraded`` (its notice, the log); a
        field without a full-text column raises ``away`` (a 503)."""
        field = self.embedding_field().name
        ranked, _ = from_keywords(queryset, str(self.search_for), away, field=field)
        self.degraded = DEGRADED
        return ranked

    def encode(self, queryset: SemanticQuerySet, query: Any) -> tuple[Any, bool]:
        """``query`` with its vector when the mode needs one (an ``EncodedText``, which the
        searches take as encoded), and whether the vector came from this process's cache."""
        if not self._needs_vector(query):
            return query, False
        record = serving_record(self.encoder, using=queryset.db)
        vector = peek_query_cache(query, record)
        cached = vector is not None
        if vector is None:
            vector = encode_query_for(query, record)
        return EncodedText(query, self.encoder, vector, record.version), cached

    # -- hooks ---------------------------------------------------------------------------------

    def get_queryset(self) -> SemanticQuerySet:
        """ListView's queryset (``model`` or ``queryset``) as a ``SemanticQuerySet``, so a
        model without ``SemanticManager`` can be searched too."""
        return as_semantic(super().get_queryset())

    def get_form(self) -> SearchForm:
        return self.form_class(self.request.GET, modes=self.modes, default_mode=self.default_mode)

    def filter_queryset(self, queryset: SemanticQuerySet) -> SemanticQuerySet:
        """The rows a search may return. With ``filterset_class``: its ``qs`` over
        ``request.GET``; override it for filters of your own (the search keeps them, in every
        mode, and both sides of a hybrid search apply them)."""
        if self.filterset_class is None:
            return queryset
        if find_spec("django_filters") is None:
            raise ImproperlyConfigured(
                f"{type(self).__name__}.filterset_class needs django-filter: "
                "`pip install django-filter`, or filter in filter_queryset() instead."
            )
        self.filterset = self.filterset_class(
            self.request.GET or None, queryset=queryset, request=self.request
        )
        return as_semantic(self.filterset.qs)

    def get_search_query(self) -> str | models.Model | None:
        """What to rank by: the text of ``?q=``, or None to search nothing (the page then
        shows the form alone). Return a model instance to list the rows most like it (its
        stored vector; an instance without one yet: return None)."""
        return self.query or None

    def search(self, queryset: SemanticQuerySet, query: Any, mode: str) -> SemanticQuerySet:
        """``queryset`` ranked for ``query`` in ``mode``: a text (encoded already in vector and
        hybrid mode) or a model instance (more like this: always by vector)."""
        name = self.embedding_field().name
        if isinstance(query, models.Model) or mode == VECTOR:
            return queryset.similar_to(query, min_similarity=self.min_similarity, field=name)
        if mode == KEYWORD:
            return queryset.keyword_search(query, field=name, match=self.keyword_match)
        ranked = queryset.hybrid_search(query, field=name)
        if self.min_similarity is not None:  # keyword matches stay: their words count
            ranked = ranked.filter(
                models.Q(similarity__gte=self.min_similarity) | models.Q(keyword_rank__isnull=False)
            )
        return ranked

    def highlight(self, page: Page | None) -> None:
        """Give the page's rows found by a passage a ``snippet`` (only the rows shown: it
        encodes their passages' sentences), in order until ``MAX_HIGHLIGHT_SENTENCES``
        sentences; the rows past them keep their passage without a mark."""
        if page is None or not isinstance(self.search_for, str) or self.mode == KEYWORD:
            return
        rows, sentences = [], 0
        for row in page.object_list:
            passage = getattr(row, "passage", None)
            text = passage.get("text") if isinstance(passage, dict) else None
            if not text:
                continue
            sentences += len(sentence_spans(text))
            if sentences > MAX_HIGHLIGHT_SENTENCES:
                break
            rows.append(row)
        highlight_hits(rows, str(self.search_for), encoder=self.encoder)

    def log_page(self, context: dict[str, Any]) -> None:
        """With ``SBERT["FEEDBACK"]["LOG"]`` on, log the first page of a text search: its rows
        get click tokens, the context ``search_log``. Later pages and searches by a row are
        not logged (a page turn is the same search; "more like this" has no query)."""
        if not logging_on() or self.unavailable or not isinstance(self.search_for, str):
            return
        page = context.get("page_obj")
        if page is None or page.number != 1:
            return
        field = self.embedding_field()
        mode = "passages" if self.mode == VECTOR and field.has_passages else self.mode
        params = self.request.GET.copy()
        for name in (self.form["q"].html_name, self.form["mode"].html_name, self.page_kwarg):
            params.pop(name, None)
        self.search_log = log_search(
            self.request,
            page.object_list,
            query=self.query,
            mode=mode,
            model=field.model,
            field=field.name,
            filters={key: params.getlist(key) for key in sorted(params)},
            encoder=field.encoder,
            version=self.served_version,
            latency_ms=self.timing.total_ms if self.timing else None,
            using=self.search_source.db,
            defer=True,
            degraded=self.degraded,
        )
        context["search_log"] = self.search_log

    def get_suggest_url(self) -> str | None:
        return reverse(self.suggest_url) if self.suggest_url else None

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        params = self.request.GET.copy()
        params.pop(self.page_kwarg, None)
        context.update(
            form=self.form,
            query=self.query,
            mode=self.mode,
            ranked_by=self.ranked_by(),
            modes=self.form.mode_choices(),
            searched=self.search_for is not None and not self.unavailable,
            timing=self.timing,
            search_ms=self.timing.total_ms if self.timing else None,
            unavailable=self.unavailable,
            degraded=self.degraded,
            filterset=self.filterset,
            page_query=params.urlencode(),
            suggest_url=self.get_suggest_url(),
            placeholder=self.placeholder,
            base_template=self.base_template,
            snippet_chars=self.snippet_chars,
            max_pages=self.max_pages,
        )
        return context

    def ranked_by(self) -> str:
        """The mode the results were ranked in: ``mode``, except ``"vector"`` for a search
        by a row (more like this), and ``"keyword"`` for a search answered by its words."""
        if self.degraded:
            return KEYWORD
        return VECTOR if isinstance(self.search_for, models.Model) else self.mode

    def get_paginate_by(self, queryset: Any) -> int | None:
        # Nothing searched: no page at all (page_obj None), rather than an empty first page.
        if self.search_for is None or self.unavailable:
            return None
        return self.paginate_by

    # -- checks and helpers --------------------------------------------------------------------

    @classmethod
    def configuration_problems(cls, **initkwargs: Any) -> list[str]:
        """What keeps this view, as ``as_view(**initkwargs)`` builds it, from answering a search:
        ``check_configuration()``'s messages and a ``suggest_url`` that names no route. Start-up
        check ``django_sbert.E015`` reports them for every routed search page, so they show in
        ``manage.py check`` rather than as a 500 on the first search."""
        view = cls(**initkwargs)
        problems = []
        try:
            view.check_configuration()
        except ImproperlyConfigured as exc:
            problems.append(str(exc))
        if view.suggest_url:
            try:
                reverse(view.suggest_url)
            except NoReverseMatch:
                problems.append(
                    f"{cls.__name__}.suggest_url = {view.suggest_url!r} names no URL: route a "
                    f"SuggestView under that name, e.g. path('suggest/', "
                    f"SuggestView.as_view(model=...), name={view.suggest_url!r})."
                )
        return problems

    def check_configuration(self) -> None:
        """Say what to change when the class attributes cannot work together."""
        name = type(self).__name__
        if not self.paginate_by or not self.max_pages:
            raise ImproperlyConfigured(
                f"{name}: paginate_by and max_pages must be positive integers (a search page "
                "fetches paginate_by * max_pages rows at most)."
            )
        field = self.embedding_field()
        text_modes = [mode for mode in self.modes if mode in TEXT_MODES]
        if text_modes and not field.has_keyword_search:
            raise ImproperlyConfigured(
                f"{name}: {field.model._meta.label}.{field.name} has no full-text column, so "
                f"the page cannot search by {' or '.join(text_modes)}. Set modes = "
                f"('{VECTOR}',) on the view, or declare EmbeddingField(..., keyword_search=True) "
                "and run makemigrations and migrate."
            )

    def embedding_field(self) -> EmbeddingField:
        """The ``EmbeddingField`` searched: ``field``, or the model's only one."""
        model = self.model or (self.queryset.model if self.queryset is not None else None)
        if model is None:
            raise ImproperlyConfigured(
                f"{type(self).__name__} is missing a model: set model = YourModel, or queryset."
            )
        fields = embedding_fields(model)
        names = ", ".join(f.name for f in fields) or "none"
        if self.field is not None:
            for field in fields:
                if field.name == self.field:
                    return field
            raise ImproperlyConfigured(
                f"{type(self).__name__}.field = {self.field!r}: {model._meta.label} has no such "
                f"EmbeddingField (it has: {names})."
            )
        if len(fields) != 1:
            raise ImproperlyConfigured(
                f"{type(self).__name__}: {model._meta.label} has "
                f"{'no EmbeddingField' if not fields else f'several EmbeddingFields ({names})'}; "
                + ("add one." if not fields else "set field = '<name>' on the view.")
            )
        return fields[0]

    @property
    def encoder(self) -> str:
        return self.embedding_field().encoder

    def result_limit(self) -> int:
        return int(self.paginate_by) * int(self.max_pages)

    def check_page(self) -> None:
        """404 for a ``?page=`` past ``max_pages``, before the search runs. Other bad pages
        (not a number, past the last page of results) get ListView's 404 later."""
        page = self.kwargs.get(self.page_kwarg) or self.request.GET.get(self.page_kwarg) or 1
        try:
            number = int(page)
        except (TypeError, ValueError):
            return
        if number > self.max_pages:
            raise Http404(
                _("A search shows at most %(pages)d pages; page %(page)d is past them.")
                % {"pages": self.max_pages, "page": number}
            )

    def not_now(self, exc: ServiceUnavailable) -> None:
        """Render the page without results (503): the visitor may try again."""
        logger.warning("%s: search unavailable: %s", type(self).__name__, exc)
        self.object_list, self.timing, self.unavailable = [], None, True
        self.retry_after = getattr(exc, "retry_after", None)

    def _needs_vector(self, query: Any) -> bool:
        return (
            isinstance(query, str) and not isinstance(query, EncodedText) and (self.mode != KEYWORD)
        )

    @staticmethod
    def _timing(target: Any, cached: bool, started: float, encoded: float) -> SearchTiming:
        done = perf_counter()
        encode_ms = (encoded - started) * 1000 if isinstance(target, EncodedText) else None
        return SearchTiming(encode_ms=encode_ms, query_ms=(done - encoded) * 1000, cached=cached)


class AsyncSearchView(SearchView):
    """``SearchView`` for ASGI sites: the text is encoded off the event loop (in the pool of
    ``query/aio.py``, as ``asimilar_to()`` does), the hooks run in Django's thread for
    database work, and the rows are fetched with ``async for``."""

    async def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        prepared = await sync_to_async(self.prepare)()
        if prepared is not None:
            return prepared
        if self.search_for is not None:
            try:
                self.object_list, self.timing = await self.afetch(self.search_source)
            except ServiceUnavailable as exc:
                self.not_now(exc)
        context = await sync_to_async(self._context_and_highlight)()
        return write_after_response(request, self.searched_response(context))

    async def afetch(self, queryset: SemanticQuerySet) -> tuple[list[models.Model], SearchTiming]:
        """``fetch()`` for the event loop."""
        started = perf_counter()
        try:
            target, cached = await self.aencode(queryset, self.search_for)
        except EncoderAway as away:  # the host's query server is away (the light layout)
            ranked = await sync_to_async(self.by_words)(queryset, away)
            rows = [row async for row in ranked[: self.result_limit()]]
            return rows, self._timing(None, False, started, started)
        encoded = perf_counter()
        self.served_version = getattr(target, "version", None)
        ranked = await sync_to_async(self.search)(queryset, target, self.mode)
        rows = [row async for row in ranked[: self.result_limit()]]
        return rows, self._timing(target, cached, started, encoded)

    async def aencode(self, queryset: SemanticQuerySet, query: Any) -> tuple[Any, bool]:
        """``encode()`` off the event loop: a cache lookup that never waits, else the pool."""
        if not self._needs_vector(query):
            return query, False
        record = await sync_to_async(serving_record)(self.encoder, using=queryset.db)
        cached = peek_query_cache(query, record) is not None
        return await encode_text(query, self.encoder, queryset.db), cached

    def _context_and_highlight(self) -> dict[str, Any]:
        context = self.get_context_data()
        self.highlight(context["page_obj"])
        self.log_page(context)
        return context
