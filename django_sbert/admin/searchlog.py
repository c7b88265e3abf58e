"""The search log in the admin: searches and events as read-only lists, and their export.

Staff see them with the ``view_searchlog`` / ``view_searchevent`` permissions; nobody adds or
edits an entry here (the log records what happened), and deleting one needs the delete
permission. "Download as UBI JSON lines" gives the selected entries in OpenSearch's User
Behavior Insights format (``feedback.export``), for the same view permission.
"""

from __future__ import annotations

import io
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from ..feedback.export import event_documents, query_documents, write_lines
from ..models import SearchEvent, SearchLog


def _download(documents: Any, name: str) -> HttpResponse:
    out = io.StringIO()
    write_lines(documents, out)
    response = HttpResponse(out.getvalue(), content_type="application/x-ndjson; charset=utf-8")
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

    list_display = ("query", "mode", "model_label", "result_count", "latency_ms", "created_at")
    list_filter = ("mode", "model_label", "created_at")
    search_fields = ("normalized",)
    date_hierarchy = "created_at"
    actions = ["download_ubi"]
    readonly_fields = [f.name for f in SearchLog._meta.fields]

    @admin.action(description="Download as UBI JSON lines", permissions=["view"])
    def download_ubi(self, request: HttpRequest, queryset: QuerySet[SearchLog]) -> HttpResponse:
        return _download(query_documents(queryset.order_by("created_at")), "ubi_queries")


@admin.register(SearchEvent)
class SearchEventAdmin(ReadOnlyLogAdmin):
    list_display = ("kind", "object_pk", "position", "dwell_ms", "search", "created_at")
    list_filter = ("kind", "created_at")
    list_select_related = ("search",)
    date_hierarchy = "created_at"
    actions = ["download_ubi"]
    readonly_fields = [f.name for f in SearchEvent._meta.fields]

    @admin.action(description="Download as UBI JSON lines", permissions=["view"])
    def download_ubi(self, request: HttpRequest, queryset: QuerySet[SearchEvent]) -> HttpResponse:
        return _download(event_documents(queryset.order_by("created_at")), "ubi_events")
