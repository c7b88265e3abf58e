"""Views of the sbert API: search/, similar/<model>/<pk>/, suggest/<model>/, embed/ and events/.

Every bad input gets a 4xx with a message saying what to send instead; none reaches the
database or the encoder unchecked. Order of checks per request (DRF's): authentication, the
model's permission classes (so the model must be known first: unknown models are 400 on
search/, 404 on similar/), throttling, then the parameters.

An unknown model is answered without the list of registered models, which a client that may
search none of them has no business seeing: staff users get the list in the message, everyone
else only in the log (a warning of the ``django_sbert.api.views`` logger, written only once the
request passed its throttle). Likewise embed/ names the configured encoders to staff only.
"""

from __future__ import annotations

import logging
from time import perf_counter
from typing import Any

from rest_framework import serializers, status
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.generics import GenericAPIView, get_object_or_404
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from ..exceptions import EncoderAway, EventRefused
from ..feedback import (
    log_search,
    logging_on,
    record_event,
    write_after_response,
)
from ..fields import EmbeddingField
from ..query import SearchTimeout, SemanticQuerySet, suggest
from ..query.fallback import DEGRADED, from_keywords
from ..serving import encode_texts
from .errors import ServiceErrorsMixin
from .pagination import SearchPagination
from .parsers import BoundedFormParser, BoundedJSONParser
from .registry import NotRegistered, SearchEntry, registry
from .schema import (
    OpenApiParameter,
    OpenApiTypes,
    error_responses,
    extend_schema,
    inline_serializer,
    schema_class,
)
from .serializers import (
    EmbedRequestSerializer,
    EmbedResponseSerializer,
    EventRequestSerializer,
    HybridResultSerializer,
    KeywordResultSerializer,
    SearchQuerySerializer,
    SearchResultSerializer,
    SimilarQuerySerializer,
    SuggestionSerializer,
    SuggestQuerySerializer,
    result_serializer_for,
    suggestion_serializer_for,
)
from .settings import api_settings
from .throttling import EmbedRateThrottle, SearchRateThrottle, SuggestRateThrottle

logger = logging.getLogger(__name__)


class NotEmbedded(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "This object has no embedding yet; try again once it has been indexed."
    default_code = "not_embedded"


def _search_response(name: str, result: Any = None, logged: bool = False) -> Any:
    if OpenApiTypes is None:  # pragma: no cover
        return None
    fields = {
        "count": serializers.IntegerField(help_text="Results in all pages (at most k)."),
        "next": serializers.URLField(allow_null=True, help_text="Next page, or null."),
        "previous": serializers.URLField(allow_null=True, help_text="Previous page, or null."),
        "results": result if result is not None else SearchResultSerializer(many=True),
    }
    if logged:
        fields["search_id"] = serializers.UUIDField(
            required=False,
            allow_null=True,
            help_text="Only with SBERT['FEEDBACK']['LOG'] on: the logged search's id; null "
            "when this search was not logged (sampled out, a later page).",
        )
        fields["degraded"] = serializers.CharField(
            required=False,
            help_text='Only when the encoder was away: "keyword", the results came from the '
            "keyword side (keyword_score, no similarity).",
        )
    return inline_serializer(name=name, fields=fields)


def _mode_results() -> Any:
    """search/'s results: one shape per mode (oneOf in the schema)."""
    if OpenApiTypes is None:  # pragma: no cover
        return None
    from drf_spectacular.utils import PolymorphicProxySerializer  # optional dependency

    return PolymorphicProxySerializer(
        component_name="SemanticSearchResult",
        serializers=[SearchResultSerializer, HybridResultSerializer, KeywordResultSerializer],
        resource_type_field_name=None,
        many=True,
    )


class SemanticResultsView(ServiceErrorsMixin, GenericAPIView):
    """What search/ and similar/ share: the model's entry, its permissions, paging of results."""

    throttle_classes = [SearchRateThrottle]
    schema = schema_class()
    _entry: SearchEntry | None = None
    search_mode = "vector"  # what the results carry: see serializers.RESULT_SERIALIZERS
    degraded = ""  # "keyword": answered from the keyword side (query/fallback.py)

    pagination_class = SearchPagination  # a subclass may name another (or None: one page)

    # -- the registered model ---------------------------------------------------------------

    def get_model_label(self) -> str:
        raise NotImplementedError("get_model_label() must be overridden by each view")

    def model_not_found(self, exc: NotRegistered) -> APIException:
        raise NotImplementedError("model_not_found() must be overridden by each view")

    def get_entry(self) -> SearchEntry:
        if self._entry is None:
            try:
                self._entry = registry.get(self.get_model_label())
            except NotRegistered as exc:
                # Throttled before anything is logged: the permission check that asked for the
                # entry runs before DRF's throttles, and an anonymous client must not be able
                # to write a warning per request (a client over its rate gets 429 instead).
                self.check_throttles(self.request)
                logger.warning(
                    "sbert API: unknown model %r requested; searchable models: %s",
                    exc.label,
                    ", ".join(registry.labels) or "none",
                )
                raise self.model_not_found(exc) from exc
        return self._entry

    def searchable_models_hint(self) -> str:
        """For staff users ' Searchable models: a, b.', for other clients nothing."""
        user = getattr(self.request, "user", None)
        if user is not None and user.is_staff:
            return f" Searchable models: {', '.join(registry.labels) or 'none'}."
        return ""

    def unknown_model_message(self, exc: NotRegistered) -> str:
        """What the client is told: the label is unknown (and, for staff, what is known)."""
        return f"Unknown model {exc.label!r}.{self.searchable_models_hint()}"

    def get_permissions(self) -> list[BasePermission]:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no model
            return []
        return self.get_entry().get_permissions()

    def get_queryset(self) -> SemanticQuerySet:
        """The rows this request may see (DjangoModelPermissions reads the model from here)."""
        if getattr(self, "swagger_fake_view", False):
            return SemanticQuerySet().none()  # pragma: no cover
        return self.get_entry().get_queryset(self.request)

    def get_serializer_class(self) -> Any:
        return result_serializer_for(self.get_entry().serializer_class, self.search_mode)

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, SearchTimeout):
            # What the client can do about it; the settings to change are the operator's
            # business (docs/search.md). ServiceErrorsMixin answers 503 with Retry-After.
            seconds = f" ({exc.seconds:g} s)" if exc.seconds else ""
            exc = SearchTimeout(
                f"The search ran longer than this site allows{seconds} and was cancelled. "
                "Try a more specific query, or try again later.",
                seconds=exc.seconds,
            )
        return super().handle_exception(exc)

    # -- results ----------------------------------------------------------------------------

    def searched_field(self, name: str | None) -> EmbeddingField:
        """The EmbeddingField searched: ``name``, or the model's first."""
        fields = self.get_entry().embedding_fields
        return next((f for f in fields if f.name == name), fields[0])

    def embedding_field_name(self, name: str | None) -> str | None:
        """Validate ``?field=`` against the model's EmbeddingFields."""
        fields = [f.name for f in self.get_entry().embedding_fields]
        names = ", ".join(fields)
        if name is None:
            if len(fields) > 1:
                message = f"This model has several EmbeddingFields; pass ?field= one of: {names}."
                raise ValidationError({"field": [message]})
            return None
        if name not in fields:
            message = f"Unknown EmbeddingField {name!r}; this model has: {names}."
            raise ValidationError({"field": [message]})
        return name

    def results_response(self, queryset: SemanticQuerySet, k: int) -> Response:
        """Fetch the top k once, then page through that list (see pagination.py for why)."""
        fields = self.get_entry().embedding_fields
        wide = [f.attname for f in fields]  # vectors and tsvectors are never shown
        wide += [f.tsvector_field_name for f in fields if f.has_keyword_search]
        rows = list(queryset.defer(*wide)[:k])
        if not self.get_entry().show_passages:  # a passage is text the listed fields may not show
            for row in rows:
                row.__dict__.pop("passage", None)
        page = self.paginate_queryset(rows)
        shown = rows if page is None else page
        extra = self.log_shown(shown, queryset)  # before serializing: it adds click tokens
        serializer = self.get_serializer(shown, many=True)
        if page is None:
            response = Response({"results": serializer.data})
        else:
            response = self.get_paginated_response(serializer.data)
        response.data.update(extra)
        if self.degraded:  # answered from the keyword side: the encoder was away
            response.data["degraded"] = self.degraded
        return write_after_response(self.request, response)

    def log_shown(self, rows: list[Any], queryset: SemanticQuerySet) -> dict[str, Any]:
        """Log the rows shown when the view logs its searches; what the response gains."""
        return {}


# ?page= and ?page_size= of the default paginator, documented on search/ and similar/.
_PAGE_PARAMETERS = (
    [
        OpenApiParameter("page", int, description="Page number, from 1."),
        OpenApiParameter(
            "page_size",
            int,
            description="Results per page (at most 100).",
        ),
    ]
    if OpenApiTypes is not None
    else []
)


@extend_schema(
    summary="Semantic, keyword or hybrid search in one registered model",
    description=(
        "mode=vector (default): encodes q, and returns the k rows of the model nearest to it by "
        "cosine similarity, nearest first; rows not yet embedded are left out. mode=keyword: "
        "PostgreSQL full-text search, best ts_rank_cd first; results carry keyword_score. "
        "mode=hybrid: both, fused (reciprocal rank fusion, or linear fusion where the settings "
        "or the serving encoder version chose it); results carry score, similarity, "
        "vector_rank, keyword_rank and keyword_score. Only rows this client may see are "
        "searched. k counts all results; pages (page, page_size) split those k."
    ),
    parameters=[SearchQuerySerializer, *_PAGE_PARAMETERS],
    responses={
        200: _search_response("SemanticSearchResponse", _mode_results(), logged=True),
        **error_responses(400, 401, 403, 404, 429, 503),
    },
)
class SearchAPIView(SemanticResultsView):
    """GET search/?model=app_label.model&q=...: the registered model's rows nearest to q."""

    schema_operation_id = "sbert_search"

    def get_model_label(self) -> str:
        label = self.request.query_params.get("model", "").strip()
        if not label:
            message = "Pass ?model=app_label.model_name of a searchable model."
            raise ValidationError({"model": [message + self.searchable_models_hint()]})
        return label

    def model_not_found(self, exc: NotRegistered) -> APIException:
        return ValidationError({"model": [self.unknown_model_message(exc)]})

    _started: float = 0.0
    _searched: dict[str, Any] | None = None

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        self._started = perf_counter()
        params = SearchQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        field = self.embedding_field_name(data.get("field"))
        self.search_mode = mode = data["mode"]
        rows = queryset = self.get_queryset()
        try:
            if mode == "vector":
                queryset = rows.similar_to(
                    data["q"], k=data["k"], min_similarity=data.get("min_similarity"), field=field
                )
            else:
                field = self.keyword_field_name(field, mode)
                if mode == "hybrid":
                    queryset = rows.hybrid_search(data["q"], k=data["k"], field=field)
                else:
                    queryset = rows.keyword_search(data["q"], k=data["k"], field=field)
        except EncoderAway as away:  # the host's query server is away (the light layout)
            queryset, field = from_keywords(rows, data["q"], away, k=data["k"], field=field)
            self.search_mode, self.degraded = "keyword", DEGRADED
        self._searched = {"q": data["q"], "mode": mode, "field": field}
        return self.results_response(queryset, data["k"])

    def log_shown(self, rows: list[Any], queryset: SemanticQuerySet) -> dict[str, Any]:
        """With SBERT["FEEDBACK"]["LOG"] on: log the first page (its rows get click tokens)
        and answer its ``search_id`` (null when not logged)."""
        if not logging_on() or self._searched is None:
            return {}
        page = getattr(self.paginator, "page", None)  # DRF's page-number paginators keep it
        if page is not None and page.number != 1:
            return {"search_id": None}
        searched = self._searched
        embedding = self.searched_field(searched["field"])
        mode = searched["mode"]
        if mode == "vector" and embedding.has_passages:
            mode = "passages"
        ignored = {"model", "q", "mode", "page", "page_size", "format"}
        filters = {
            key: self.request.query_params.getlist(key)
            for key in self.request.query_params
            if key not in ignored
        }
        entry = log_search(
            self.request,
            rows,
            query=searched["q"],
            mode=mode,
            model=self.get_entry().model,
            field=embedding.name,
            filters=filters,
            encoder=embedding.encoder,
            latency_ms=(perf_counter() - self._started) * 1000,
            using=queryset.db,
            defer=True,  # written once the response is sent (results_response)
            degraded=self.degraded,
        )
        return {"search_id": None if entry is None else str(entry.pk)}

    def keyword_field_name(self, field: str | None, mode: str) -> str | None:
        """The EmbeddingField whose full-text column mode=keyword/hybrid searches; 400 if none."""
        fields = self.get_entry().embedding_fields
        chosen = [f for f in fields if f.name == field] if field else fields
        searchable = [f for f in chosen if f.has_keyword_search]
        if not searchable:
            label = self.get_entry().label
            raise ValidationError(
                {
                    "mode": f"mode={mode} needs full-text search, which {label} does not have "
                    f"(declare its EmbeddingField with keyword_search=True and migrate); use "
                    "mode=vector."
                }
            )
        return searchable[0].name if field is None else field


@extend_schema(
    summary="Rows most similar to one row",
    description=(
        "The k rows nearest to the stored embedding of row pk (which is left out), among the "
        "rows this client may see. 404 when the row does not exist or is not visible; 409 when "
        "it has not been embedded yet."
    ),
    parameters=[
        OpenApiParameter("model", str, OpenApiParameter.PATH, description="app_label.model_name"),
        OpenApiParameter("pk", str, OpenApiParameter.PATH, description="Primary key of the row."),
        SimilarQuerySerializer,
        *_PAGE_PARAMETERS,
    ]
    if OpenApiTypes is not None
    else None,
    responses={
        200: _search_response("SimilarItemsResponse"),
        **error_responses(400, 401, 403, 404, 409, 429, 503),
    },
)
class SimilarView(SemanticResultsView):
    """GET similar/<app_label.model>/<pk>/: rows nearest to one row, the row itself excluded."""

    schema_operation_id = "sbert_similar"

    def get_model_label(self) -> str:
        return self.kwargs["model"]

    def model_not_found(self, exc: NotRegistered) -> APIException:
        return NotFound(self.unknown_model_message(exc))

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        params = SimilarQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        field = self.embedding_field_name(data.get("field"))
        queryset = self.get_queryset()
        # DRF's get_object_or_404 also turns a malformed pk ("abc" for an integer key) into 404.
        obj = get_object_or_404(queryset, pk=self.kwargs["pk"])
        self.check_object_permissions(request, obj)
        source = self.searched_field(field)
        # A vector without its encoder version (written outside django-sbert) cannot be kept
        # to one version's rows: as good as none until the sweep re-embeds it.
        if getattr(obj, source.attname) is None or getattr(obj, source.version_field_name) is None:
            raise NotEmbedded()
        similar = queryset.similar_to(
            obj, k=data["k"], min_similarity=data.get("min_similarity"), field=field
        )
        return self.results_response(similar, data["k"])


@extend_schema(
    summary="Suggestions as the user types",
    description=(
        "Up to k rows of the model for the text typed so far, best first: a prefix match of "
        "its words on the keyword column (the last word, unless followed by a space, as a "
        "prefix) fused by reciprocal rank fusion with a vector search of the text. A text "
        "shorter than 4 characters is answered by the prefix "
        "match alone; one shorter than 2 characters, or blank, gets no suggestions. "
        "Only rows this client may see are suggested. Throttled by its own rate (suggest), "
        "apart from search/'s."
    ),
    parameters=[
        OpenApiParameter("model", str, OpenApiParameter.PATH, description="app_label.model_name"),
        SuggestQuerySerializer,
    ]
    if OpenApiTypes is not None
    else None,
    responses={
        200: inline_serializer(
            name="SuggestResponse", fields={"results": SuggestionSerializer(many=True)}
        )
        if OpenApiTypes is not None
        else None,
        **error_responses(400, 401, 403, 404, 429, 503),
    },
)
class SuggestAPIView(SemanticResultsView):
    """GET suggest/<app_label.model>/?q=...: suggestions for the text typed so far."""

    schema_operation_id = "sbert_suggest"
    throttle_classes = [SuggestRateThrottle]
    pagination_class = None

    def get_model_label(self) -> str:
        return self.kwargs["model"]

    def model_not_found(self, exc: NotRegistered) -> APIException:
        return NotFound(self.unknown_model_message(exc))

    def get_serializer_class(self) -> Any:
        return suggestion_serializer_for(self.get_entry().serializer_class)

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        params = SuggestQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        field = self.embedding_field_name(data.get("field"))
        suggestions = suggest(self.get_queryset(), data["q"], k=data["k"], field=field)
        context = {**self.get_serializer_context(), "show_label": self.shows_label(field)}
        serializer = self.get_serializer(suggestions, many=True, context=context)
        return Response({"results": serializer.data})

    def shows_label(self, field: str | None) -> bool:
        """Whether the label's field (the first source field) is among the registered ones:
        a label is text from the row, which the registered fields may not show."""
        entry = self.get_entry()
        fields = entry.embedding_fields
        embedding = next((f for f in fields if f.name == field), None)
        if embedding is None:
            keyworded = [f for f in fields if f.has_keyword_search]
            embedding = keyworded[0] if len(keyworded) == 1 else fields[0]
        sources = embedding.source_fields
        if not sources:
            return False
        shown = entry.serializer_class().fields.values()
        return any(getattr(f, "source", None) == sources[0] for f in shown)


@extend_schema(
    summary="Encode texts into vectors",
    description=(
        "Encodes each text with the site's encoder and returns the vectors in the order given. "
        "Authenticated clients only by default; bounded number and length of texts."
    ),
    request=EmbedRequestSerializer,
    responses={
        200: EmbedResponseSerializer,
        **error_responses(400, 401, 403, 413, 415, 429, 503),
    },
)
class EmbedView(ServiceErrorsMixin, GenericAPIView):
    """POST embed/ {"texts": [...], "normalize": true}: vectors from the site's encoder."""

    schema_operation_id = "sbert_embed"

    throttle_classes = [EmbedRateThrottle]
    parser_classes = [BoundedJSONParser]
    serializer_class = EmbedRequestSerializer
    schema = schema_class()

    def get_permissions(self) -> list[BasePermission]:
        return [permission() for permission in api_settings.PERMISSION_CLASSES["embed"] or []]

    def get_serializer_context(self) -> dict[str, Any]:
        # The configured encoders' names are the site's setup: an unknown name is answered
        # with the list for staff only (like the searchable models of search/).
        user = getattr(self.request, "user", None)
        return {**super().get_serializer_context(), "list_encoders": bool(user and user.is_staff)}

    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        name = data["encoder"]
        # The shared path, normalized or not: one forward pass per encoder at a time, so a
        # request holds the encoder for at most EMBED_MAX_TEXTS x EMBED_MAX_TEXT_LENGTH
        # characters' worth of encoding (both checked by the serializer above).
        vectors = encode_texts(
            data["texts"], name, normalize=data["normalize"], role=data["prompt"]
        )
        return Response(
            {"encoder": name, "dimensions": int(vectors.shape[1]), "vectors": vectors.tolist()}
        )


@extend_schema(
    summary="Report a click or a conversion on a logged search result",
    description=(
        "token: the result's click_token from search/ (signed: it names the search, the row "
        "and its position, and cannot be edited). kind: click (default) or one of "
        "SBERT['FEEDBACK']['CONVERSIONS']. dwell_ms: optional, how long the visitor stayed. "
        "One event is kept per search, row and kind: a repeated report changes nothing. "
        "Form-encoded bodies are accepted too (navigator.sendBeacon). 404 when the site does "
        "not log searches; 410 when the search was purged."
    ),
    request=EventRequestSerializer,
    responses={
        202: inline_serializer(name="EventResponse", fields={"status": serializers.CharField()})
        if OpenApiTypes is not None
        else None,
        **error_responses(
            400,
            404,
            410,
            413,
            415,
            429,
            descriptions={
                400: "A token that was changed, forged or expired; an unknown kind; a bad "
                "dwell_ms. Nothing is stored.",
                404: "This site does not log searches (SBERT['FEEDBACK']['LOG']).",
                410: "The search of this token was purged or forgotten; nothing is stored.",
            },
        ),
    },
)
class EventView(GenericAPIView):
    """POST events/ {"token": ..., "kind": "click", "dwell_ms": 1200}: one event, at most once.

    No authentication class and no CSRF check: the signed token is the proof that the result
    was shown, and a beacon cannot send a CSRF header. Throttled by
    SBERT["RATES"]["clicks"] (per user or session, else address), counted in
    ``record_event`` so that the plain view sbert/click/ shares the count.
    """

    schema_operation_id = "sbert_event"
    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    throttle_classes: list[Any] = []
    serializer_class = EventRequestSerializer
    parser_classes = [BoundedJSONParser, BoundedFormParser]  # a form: navigator.sendBeacon
    schema = schema_class()

    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            # The Django request: its session and user (Django's middleware), not DRF's
            # (none here), tell which client counts against the rate.
            record_event(request._request, data["token"], data["kind"], data.get("dwell_ms"))
        except EventRefused as exc:
            return Response({"detail": str(exc)}, status=exc.status)
        return Response({"status": "accepted"}, status=status.HTTP_202_ACCEPTED)
