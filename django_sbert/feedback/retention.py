"""How long the log keeps things, and forgetting one person.

``purge_expired()`` deletes searches and events older than ``SBERT["FEEDBACK"]
["RETENTION_DAYS"]`` (the beat entry ``django_sbert.celery.feedback_purge_schedule()`` runs it
daily; ``sbert_feedback purge`` from cron). ``forget_client(key)`` deletes one client's
searches and events, for a person's request to be forgotten; ``forget_user(user)`` computes the
key from the user id.

Both reach the copies too: the pairs from behaviour and judged queries made from what was
forgotten or purged (docs/security.md says which, and what trained weights keep).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import router, transaction
from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from ..conf import sbert_settings
from ..models import BEHAVIOUR_SOURCE, JudgedQuery, SearchEvent, SearchLog, TrainingPair
from .evidence import pairs_of_clients
from .visitors import client_key_for_session, client_key_for_user


class Deleted(NamedTuple):
    """What a purge or a forgetting deleted."""

    searches: int
    events: int
    pairs: int = 0  # pairs from behaviour
    judged_queries: int = 0  # judged queries with the text of one of those pairs


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


def delete_pairs(pairs: QuerySet[TrainingPair], *, same_text: bool) -> tuple[int, int]:
    """Delete ``pairs`` (their evidence with them) and the judged queries with one of their
    query texts; with ``same_text``, every pair from behaviour with such a text too, else only
    the judged queries whose text no remaining pair from behaviour has. (pairs, judged
    queries) deleted."""
    behaviour = TrainingPair.objects.filter(source__startswith=BEHAVIOUR_SOURCE)
    with transaction.atomic():
        texts = sorted(set(pairs.values_list("text_a", flat=True)))
        deleted = pairs.delete()[1].get(TrainingPair._meta.label, 0)
        judged = 0
        for start in range(0, len(texts), 500):
            chunk = texts[start : start + 500]
            if same_text:
                found = behaviour.filter(text_a__in=chunk)
                deleted += found.delete()[1].get(TrainingPair._meta.label, 0)
            else:
                kept = set(behaviour.filter(text_a__in=chunk).values_list("text_a", flat=True))
                chunk = [text for text in chunk if text not in kept]
            found = JudgedQuery.objects.filter(text__in=chunk)
            judged += found.delete()[1].get(JudgedQuery._meta.label, 0)
    return deleted, judged


def expired_pairs(cutoff: datetime) -> QuerySet[TrainingPair]:
    """The pairs from behaviour whose every click is older than ``cutoff``, and those without
    recorded visitors (made before pairs recorded them) created before it."""
    behaviour = TrainingPair.objects.filter(source__startswith=BEHAVIOUR_SOURCE)
    aged = behaviour.annotate(latest=Max("evidence__clicked_at")).filter(latest__lt=cutoff)
    unrecorded = behaviour.filter(evidence__isnull=True, created_at__lt=cutoff)
    return TrainingPair.objects.filter(
        Q(pk__in=aged.values("pk")) | Q(pk__in=unrecorded.values("pk"))
    )


def purge_expired(days: int | None = None) -> Deleted:
    """Delete searches and events older than ``days`` (default ``RETENTION_DAYS``; None there:
    nothing), and the pairs and judged queries that rested on them."""
    if days is None:
        days = sbert_settings.FEEDBACK["RETENTION_DAYS"]
        if days is None:
            return Deleted(0, 0)
    cutoff = timezone.now() - timedelta(days=int(days))
    database = router.db_for_write(SearchLog)
    searches, events = _delete_searches(
        SearchLog.objects.using(database).filter(created_at__lt=cutoff), database
    )
    # Events of newer searches age too (a search's late clicks are younger than it).
    events += SearchEvent.objects.using(database).filter(created_at__lt=cutoff).delete()[0]
    return Deleted(searches, events, *delete_pairs(expired_pairs(cutoff), same_text=False))


def forget_client(key: str) -> Deleted:
    """Delete every search and event of client ``key``, every pair it helped make, and the
    judged queries with those pairs' query texts."""
    database = router.db_for_write(SearchLog)
    searches, events = _delete_searches(
        SearchLog.objects.using(database).filter(client=key), database
    )
    events += SearchEvent.objects.using(database).filter(client=key).delete()[0]
    return Deleted(searches, events, *delete_pairs(pairs_of_clients([key]), same_text=True))


def forget_user(user: Any) -> Deleted:
    """``forget_client()`` for a user (an instance or a primary key)."""
    return forget_client(client_key_for_user(user))


def forget_session(session_key: str) -> Deleted:
    """``forget_client()`` for an anonymous visitor's session key."""
    return forget_client(client_key_for_session(session_key))
