"""How long the log keeps things, and forgetting one person.

``purge_expired()`` deletes searches and events older than ``SBERT["FEEDBACK"]
["RETENTION_DAYS"]`` (the beat entry ``django_sbert.celery.feedback_purge_schedule()`` runs it
daily; ``sbert_feedback purge`` from cron). ``forget_client(key)`` deletes one client's
searches and events, for a person's request to be forgotten; ``forget_user(user)`` computes the
key from the user id.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import router
from django.utils import timezone

from ..conf import sbert_settings
from ..models import SearchEvent, SearchLog
from .clients import client_key_for_session, client_key_for_user

BATCH = 5000  # searches deleted per statement: short locks, bounded memory


def _delete_searches(searches: Any, database: str) -> tuple[int, int]:
    """Delete ``searches`` and their events in batches; (searches, events) deleted."""
    deleted_searches = deleted_events = 0
    while True:
        ids = list(searches.values_list("pk", flat=True)[:BATCH])
        if not ids:
            return deleted_searches, deleted_events
        # Django deletes the searches' events first, in one statement (no signals to send).
        _, counts = SearchLog.objects.using(database).filter(pk__in=ids).delete()
        deleted_searches += counts.get(SearchLog._meta.label, 0)
        deleted_events += counts.get(SearchEvent._meta.label, 0)


def purge_expired(days: int | None = None) -> tuple[int, int]:
    """Delete searches and events older than ``days`` (default ``RETENTION_DAYS``; None there:
    nothing); (searches, events) deleted."""
    if days is None:
        days = sbert_settings.FEEDBACK["RETENTION_DAYS"]
        if days is None:
            return 0, 0
    cutoff = timezone.now() - timedelta(days=int(days))
    database = router.db_for_write(SearchLog)
    searches, events = _delete_searches(
        SearchLog.objects.using(database).filter(created_at__lt=cutoff), database
    )
    # Events of newer searches age too (a search's late clicks are younger than it).
    events += SearchEvent.objects.using(database).filter(created_at__lt=cutoff).delete()[0]
    return searches, events


def forget_client(key: str) -> tuple[int, int]:
    """Delete every search and event of client ``key``; (searches, events) deleted."""
    database = router.db_for_write(SearchLog)
    searches, events = _delete_searches(
        SearchLog.objects.using(database).filter(client=key), database
    )
    events += SearchEvent.objects.using(database).filter(client=key).delete()[0]
    return searches, events


def forget_user(user: Any) -> tuple[int, int]:
    """``forget_client()`` for a user (an instance or a primary key)."""
    return forget_client(client_key_for_user(user))


def forget_session(session_key: str) -> tuple[int, int]:
    """``forget_client()`` for an anonymous visitor's session key."""
    return forget_client(client_key_for_session(session_key))
