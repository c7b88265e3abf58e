"""Celery task of the feedback wing: the log's retention.

``feedback_purge``
    Delete searches and events older than ``SBERT["FEEDBACK"]["RETENTION_DAYS"]``, and the pairs
    from behaviour and judged queries that rested on them; scheduled by the beat entry
    ``django_sbert.celery.feedback_purge_schedule()``.
"""

from __future__ import annotations

import logging

from celery import shared_task

from ..celery import FEEDBACK_PURGE_TASK
from .retention import purge_expired

logger = logging.getLogger(__name__)


@shared_task(name=FEEDBACK_PURGE_TASK)
def feedback_purge(days: int | None = None) -> dict[str, int]:
    """Delete what is past retention; the counts deleted."""
    deleted = purge_expired(days)
    if any(deleted):
        logger.info(
            "django-sbert: purged %d searches, %d events, %d pairs from behaviour and %d judged "
            "queries past retention",
            *deleted,
        )
    return deleted._asdict()
