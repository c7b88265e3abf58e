"""The log in OpenSearch's User Behavior Insights (UBI) format, one JSON object a line.

A search is a UBI query (``ubi_queries``, ``query_documents``), an event a UBI event
(``ubi_events``, ``event_documents``); each function maps the fields. Rows are read in
chunks, so a large log is written without holding it in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

from ..models import SearchEvent, SearchLog

CHUNK = 2000


def _timestamp(moment: Any) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def ubi_query(entry: SearchLog) -> dict[str, Any]:
    """One search as a UBI query document."""
    return {
        "application": entry.model_label,
        "query_id": str(entry.pk),
        "client_id": entry.client,
        "user_query": entry.query,
        "query": entry.query,
        "timestamp": _timestamp(entry.created_at),
        "query_response_id": str(entry.pk),
        "query_response_hit_ids": [str(row[0]) for row in entry.results],
        "object_id_field": "pk",
        "query_attributes": {
            "mode": entry.mode,
            "degraded": entry.degraded,
            "model": entry.model_label,
            "field": entry.field,
            "encoder": entry.encoder_name,
            "version": entry.version,
            "filters_digest": entry.filters_digest,
            "latency_ms": entry.latency_ms,
            "result_count": entry.result_count,
            "normalized_query": entry.normalized,
        },
    }


def ubi_event(event: SearchEvent, application: str = "") -> dict[str, Any]:
    """One event as a UBI event document."""
    attributes: dict[str, Any] = {
        "object": {"object_id": event.object_pk, "object_id_field": "pk"},
        "position": {"ordinal": event.position},
    }
    if event.dwell_ms is not None:
        attributes["dwell_ms"] = event.dwell_ms
    return {
        "application": application,
        "action_name": event.kind,
        "query_id": str(event.search_id),
        "client_id": event.client,
        "timestamp": _timestamp(event.created_at),
        "message_type": "CLICK_THROUGH" if event.kind == "click" else "CONVERSION",
        "event_attributes": attributes,
    }


def query_documents(searches: Iterable[SearchLog] | None = None) -> Iterator[dict[str, Any]]:
    """UBI query documents of ``searches`` (default all), oldest first."""
    if searches is None:
        searches = SearchLog.objects.order_by("created_at")
    for entry in _chunked(searches):
        yield ubi_query(entry)


def event_documents(events: Iterable[SearchEvent] | None = None) -> Iterator[dict[str, Any]]:
    """UBI event documents of ``events`` (default all), oldest first."""
    if events is None:
        events = SearchEvent.objects.order_by("created_at")
    if hasattr(events, "select_related"):
        events = events.select_related("search").only(*EVENT_FIELDS)
    for event in _chunked(events):
        yield ubi_event(event, event.search.model_label)


EVENT_FIELDS = (
    "search_id",
    "object_pk",
    "position",
    "kind",
    "dwell_ms",
    "client",
    "created_at",
    "search__model_label",
)


def _chunked(rows: Iterable[Any]) -> Iterator[Any]:
    iterator = getattr(rows, "iterator", None)
    return iterator(chunk_size=CHUNK) if iterator is not None else iter(rows)


def write_lines(documents: Iterable[dict[str, Any]], out: IO[str]) -> int:
    """Write each document as one JSON line; how many were written."""
    count = 0
    for document in documents:
        out.write(json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n")
        count += 1
    return count
