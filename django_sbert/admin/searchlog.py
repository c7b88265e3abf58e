"""The search log in the admin: searches and events as read-only lists, and their export.

Staff see them with the ``view_searchlog`` / ``view_searchevent`` permissions; nobody adds or
edits an entry here (the log records what happened), and deleting one needs the delete
permission. "Download as UBI JSON lines" gives the selected entries in OpenSearch's User
Behavior Insights format (``feedback.export``), for the same view permission: streamed as it
is read, ``EXPORT_CHUNK`` rows a query, and at most ``MAX_EXPORT_ROWS`` rows a download (the
oldest first; past them a warning says to narrow the selection or run ``manage.py
sbert_feedback export``, which has no cap).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone

from ..feedback.export import EVENT_FIELDS, event_documents, query_documents, write_lines
from ..models import SearchEvent, SearchLog

MAX_EXPORT_ROWS = 100_000  # rows one download holds at most: a request is not a batch job
EXPORT_CHUNK = 2000  # rows read per query while the download streams
FLUSH_CHARS = 64 * 1024  # characters of JSON lines sent at a time


def _rows(queryset: QuerySet) -> Iterator[Any]:
    """The first ``MAX_EXPORT_ROWS`` rows of ``queryset``, ``EXPORT_CHUNK`` per query (plain
    queries, no server-side cursor: the response is read after the view's transaction)."""
    for start in range(0, MAX_EXPORT_ROWS, EXPORT_CHUNK):
        chunk = list(queryset[start : min(start + EXPORT_CHUNK, MAX_EXPORT_ROWS)])
        yield from chunk
        if len(chunk) < EXPORT_CHUNK:
            return


def _lines(documents: Iterable[dict[str, Any]]) -> Iterator[str]:
    """``documents`` as JSON lines (``write_lines``), sent about ``FLUSH_CHARS`` at a time."""
    out = io.StringIO()
    for document in documents:
        write_lines([document], out)
        if out.tell() >= FLUSH_CHARS:
            yield out.getvalue()
            out = io.StringIO()
    yield out.getvalue()


def _download(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet,
    documents: Callable[[Iterable[Any]], Iterable[dict[str, Any]]],
    name: str,
) -> StreamingHttpResponse:
    ordered = queryset.order_by("created_at", "pk")
    if ordered[MAX_EXPORT_ROWS : MAX_EXPORT_ROWS + 1].exists():
        model_admin.message_user(
            request,
            f"The download holds the oldest {MAX_EXPORT_ROWS:,} of the selected entries: select "
            "fewer (a date range), or run manage.py sbert_feedback export, which has no cap.",
            messages.WARNING,
        )
    response = StreamingHttpResponse(
        _lines(documents(_rows(ordered))), content_type="application/x-ndjson; charset=utf-8"
    )
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="{name}-{stamp}.jsonl"'
    return response


class ReadOnlyLogAdmin(admin.ModelAdmin):
    """A list to read: no add, no change (delete stays with its permission)."""

    list_per_page = 50
    show_full_result_count = False  # a large log: no COUNT(*) over it per page

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SearchLogListAdmin(ReadOnlyLogAdmin):
    """The searches' list and its UBI download; registered with the analytics page as
    ``admin.feedback.SearchLogAdmin``."""

    list_display = (
        "query",
        "mode",
        "degraded",
        "model_label",
        "result_count",
        "latency_ms",
        "created_at",
    )
    list_filter = ("mode", "degraded", "model_label", "created_at")
    search_fields = ("normalized",)
    date_hierarchy = "created_at"
    actions = ["download_ubi"]
    readonly_fields = [f.name for f in SearchLog._meta.fields]

    @admin.action(description="Download as UBI JSON lines", permissions=["view"])
    def download_ubi(
        self, request: HttpRequest, queryset: QuerySet[SearchLog]
    ) -> StreamingHttpResponse:
        return _download(self, request, queryset, query_documents, "ubi_queries")


@admin.register(SearchEvent)
class SearchEventAdmin(ReadOnlyLogAdmin):
    list_display = ("kind", "object_pk", "position", "dwell_ms", "search", "created_at")
    list_filter = ("kind", "created_at")
    list_select_related = ("search",)
    date_hierarchy = "created_at"
    actions = ["download_ubi"]
    readonly_fields = [f.name for f in SearchEvent._meta.fields]

    @admin.action(description="Download as UBI JSON lines", permissions=["view"])
    def download_ubi(
        self, request: HttpRequest, queryset: QuerySet[SearchEvent]
    ) -> StreamingHttpResponse:
        rows = queryset.select_related("search").only(*EVENT_FIELDS)
        return _download(self, request, rows, event_documents, "ubi_events")
