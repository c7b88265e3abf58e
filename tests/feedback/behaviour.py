"""Hand-built search logs for the feedback tests: searches and clicks written as the log
writes them (``SearchLog.results`` as ``[[pk, position, score], ...]``, positions from 1)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from django_sbert.models import SearchEvent, SearchLog

LABEL = "testapp.Article"


def at(day: str, hour: int = 12) -> datetime:
    """Noon (or ``hour``) of ``day`` (YYYY-MM-DD) in the current time zone."""
    return timezone.make_aware(datetime.fromisoformat(day) + timedelta(hours=hour))


def normalize(query: str) -> str:
    return " ".join(query.lower().split())


def search(
    query: str,
    shown: Sequence[Any],
    *,
    when: datetime,
    client: str,
    clicks: Sequence[Any] = (),
    version: str = "v1",
    label: str = LABEL,
    field: str = "embedding",
) -> SearchLog:
    """One logged search showing ``shown`` (pks, best first) and the clicks on some of them."""
    log = SearchLog.objects.create(
        query=query,
        normalized=normalize(query),
        mode="vector",
        model_label=label,
        field=field,
        encoder_name="default",
        version=version,
        results=[[str(pk), position, 0.5] for position, pk in enumerate(shown, start=1)],
        result_count=len(shown),
        client=client,
        created_at=when,
    )
    positions = {str(pk): position for position, pk in enumerate(shown, start=1)}
    for offset, pk in enumerate(clicks):
        SearchEvent.objects.create(
            search=log,
            object_pk=str(pk),
            position=positions[str(pk)],
            kind="click",
            client=client,
            created_at=when + timedelta(seconds=5 + offset),
        )
    return log
