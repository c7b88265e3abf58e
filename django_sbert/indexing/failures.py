"""Rows indexing skipped: one bad row never blocks the others.

Two errors belong to one row, not to the task that met them:

* its source raised while its text was built (a callable source whose related object is gone,
  a payload that does not parse, ...): ``read_text`` returns a ``RowFailure`` instead;
* the database refused its vector (``DataError`` / ``IntegrityError``: a NaN in the vector, a
  CHECK constraint or trigger of the table): ``each_or_alone`` writes the rows one by one, each
  in its own savepoint, to find it.

Such a row is logged, recorded in ``SkippedRow`` and skipped; the rest of the chunk is
written (docs/indexing.md). A database error raised *by a source* is not the row's fault: it
fails the task (retried when transient). The sweep leaves a recorded row alone while it is
unchanged until its ``retry_after`` (``RETRY_SECONDS``, doubling per failure up to
``RETRY_MAX_SECONDS``); a row that is then embedded (or current, or deleted) loses its record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    connections,
    models,
    transaction,
)
from django.db.models.functions import Cast
from django.utils import timezone

from ..models import SkippedRow, SkipStage
from .refs import FieldRef, Pk, content_type_id

logger = logging.getLogger(__name__)

# Errors with which the database refuses one row's write: the others can still be written.
ROW_ERRORS: tuple[type[BaseException], ...] = (DataError, IntegrityError)

MAX_MESSAGE = 2000  # characters of an error message kept in SkippedRow.message
# A row that failed on its own is left alone this long before the sweep tries it again, doubling
# per further failure: soon enough for a fixed bug, rarely enough that a row that always fails
# costs the workers almost nothing. An edit or sbert_reindex retries it at once.
RETRY_SECONDS = 3600.0
RETRY_MAX_SECONDS = 7 * 86400.0

T = TypeVar("T")


@dataclass(frozen=True)
class RowFailure:
    """Why one row was skipped: at which ``stage``, the exception, its text hash if known."""

    pk: Pk
    stage: str  # a SkipStage value
    error: BaseException
    text_hash: str = ""  # "" when the text could not be built


def read_text(ref: FieldRef, instance: models.Model) -> str | RowFailure:
    """The row's text, or a ``RowFailure`` when its source raised (database errors propagate)."""
    try:
        return ref.field.get_source_text(instance)
    except DatabaseError:
        raise
    except Exception as exc:
        return RowFailure(instance.pk, SkipStage.SOURCE, exc)


def each_or_alone(
    alias: str, items: Sequence[T], write: Callable[[Sequence[T]], object]
) -> tuple[list[T], list[tuple[T, BaseException]]]:
    """``write(items)`` in one statement; if the database refuses it for one row's sake, write
    each item alone in its own savepoint, so a bad row costs only itself.

    Call it inside ``transaction.atomic(using=alias)``. Returns (written, [(refused, error)]).
    """
    if not items:
        return [], []
    try:
        with transaction.atomic(using=alias):
            write(items)
        return list(items), []
    except ROW_ERRORS as exc:
        if len(items) == 1:
            return [], [(items[0], exc)]
    written: list[T] = []
    refused: list[tuple[T, BaseException]] = []
    for item in items:
        try:
            with transaction.atomic(using=alias):
                write([item])
        except ROW_ERRORS as exc:
            refused.append((item, exc))
        else:
            written.append(item)
    return written, refused


def _message(error: BaseException) -> str:
    # PostgreSQL text cannot hold NUL; a message is for people, so cap its length too.
    return str(error).replace("\x00", "\\x00")[:MAX_MESSAGE]


def _first_line(error: BaseException) -> str:
    return (_message(error).splitlines() or [""])[0]


# The stage of a row whose chunk killed the worker embedding it, delivery after delivery
# (SBERT["MAX_DELIVERIES"]): recorded like the others, so the sweep backs off the same way.
WORKER_LOST = "worker"

_DOING = {
    WORKER_LOST: "the worker encoding it died:",
    SkipStage.SOURCE: "its source raised",
    SkipStage.WRITE: "the database refused its vector with",
    SkipStage.STAGE: "the database refused its staged vector with",
}


def record(ref: FieldRef, failures: Sequence[RowFailure], version: str) -> None:
    """Log each skipped row at WARNING and upsert its ``SkippedRow`` (one statement)."""
    if not failures:
        return
    by_pk = {str(failure.pk): failure for failure in failures}  # one upsert row per pk
    for failure in by_pk.values():
        logger.warning(
            "django-sbert: skipped %s pk=%r (field %r): %s %s: %s",
            ref.label,
            failure.pk,
            ref.name,
            _DOING.get(failure.stage, failure.stage),
            type(failure.error).__name__,
            _first_line(failure.error),
        )
    connection = connections[ref.db_alias]
    table = connection.ops.quote_name(SkippedRow._meta.db_table)
    first, longest = RETRY_SECONDS, RETRY_MAX_SECONDS
    now = timezone.now()
    sql = (
        f"INSERT INTO {table} AS t (content_type_id, object_pk, field, stage, text_hash, version, "
        "error, message, failures, first_seen, last_seen, retry_after) "
        "SELECT %s, v.pk, %s, v.stage, v.hash, %s, v.error, v.message, 1, %s, %s, "
        "%s::timestamptz + make_interval(secs => LEAST(%s::float8, %s::float8)) "
        "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[]) "
        "AS v(pk, stage, hash, error, message) "
        "ON CONFLICT (content_type_id, field, object_pk) DO UPDATE SET "
        "stage = EXCLUDED.stage, text_hash = EXCLUDED.text_hash, version = EXCLUDED.version, "
        "error = EXCLUDED.error, message = EXCLUDED.message, failures = t.failures + 1, "
        "last_seen = EXCLUDED.last_seen, retry_after = EXCLUDED.last_seen + "
        "make_interval(secs => LEAST(%s::float8 * power(2, t.failures), %s::float8))"
    )
    params = [
        content_type_id(ref),
        ref.name,
        version,
        now,
        now,
        now,
        first,
        longest,
        list(by_pk),
        [str(failure.stage) for failure in by_pk.values()],
        [failure.text_hash for failure in by_pk.values()],
        [type(failure.error).__name__[:200] for failure in by_pk.values()],
        [_message(failure.error) for failure in by_pk.values()],
        first,
        longest,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def forget(ref: FieldRef, pks: Sequence[Pk], *, before: datetime) -> int:
    """Drop the records of rows among ``pks`` that were not recorded again since ``before``
    (they were embedded, found up to date or deleted meanwhile); returns how many went."""
    if not pks:
        return 0
    deleted, _ = (
        SkippedRow.objects.using(ref.db_alias)
        .filter(
            content_type_id=content_type_id(ref),
            field=ref.name,
            object_pk__in=[str(pk) for pk in pks],
            last_seen__lt=before,
        )
        .delete()
    )
    return deleted


def skipped_rows(ref: FieldRef) -> models.QuerySet[SkippedRow]:
    """The ``SkippedRow`` records of one field, newest first."""
    return SkippedRow.objects.using(ref.db_alias).filter(
        content_type_id=content_type_id(ref), field=ref.name
    )


def _waiting(ref: FieldRef, version: str) -> models.QuerySet[SkippedRow]:
    return skipped_rows(ref).filter(version=version, retry_after__gt=timezone.now())


def waiting_exists(ref: FieldRef, version: str, current_hash: str) -> models.Exists:
    """SQL: the outer row is recorded, unchanged (``current_hash`` names the annotation of its
    current text hash) and not due for a retry: the sweep leaves it alone."""
    return models.Exists(
        _waiting(ref, version).filter(
            object_pk=Cast(models.OuterRef("pk"), models.TextField()),
            text_hash=models.OuterRef(current_hash),
        )
    )


def waiting_hashes(ref: FieldRef, pks: Sequence[Pk], version: str) -> dict[str, str]:
    """``{str(pk): recorded text hash}`` for rows among ``pks`` not due for a retry yet."""
    return dict(
        _waiting(ref, version)
        .filter(object_pk__in=[str(pk) for pk in pks])
        .values_list("object_pk", "text_hash")
    )
