"""Which rows need a vector: missing, made from older text, or by another encoder version.

A row is *stale* when its vector is NULL, or the hash of its current text differs from
``<name>_hash``, or ``<name>_version`` differs from the serving encoder's version; for a field
with ``passages=``, also when it has no passages. When the
field's source is a tuple of field names, PostgreSQL computes the hash of the current text
itself (``EmbeddingField.sql_text_hash_expression()``), so "which rows are stale" is one query
that also catches ``queryset.update()`` and raw SQL edits. A callable source can only be
evaluated in Python, so those fields are scanned in batches.

The sweep asks ``iter_stale_pks(..., leave_skipped=True)``: rows that indexing skipped after an
error of their own (``failures.py``) and that are unchanged since are left out until their
retry time, so one bad row is not sent again at every sweep.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import models
from django.db.models import Q

from ..fields.columns import text_hash
from ..passages import passages_exist
from .failures import RowFailure, read_text, skipped_rows, waiting_exists, waiting_hashes
from .refs import FieldRef, Pk
from .rows import is_current, light_rows, pages_by_pk


@dataclass
class FieldStatus:
    """Counts for ``sbert_status``."""

    ref: FieldRef
    rows: int
    embedded: int  # vector present (possibly stale)
    missing: int  # no vector
    stale: int  # missing, or vector present but text or encoder changed
    version: str
    versions: dict[str, int] = field(default_factory=dict)  # stored version -> rows
    skipped: int = 0  # rows skipped after errors of their own (SkippedRow), counted in stale


def _sql_hash(ref: FieldRef) -> Any | None:
    """The field's text hash as a SQL expression, or None when only Python can compute it."""
    return ref.field.sql_text_hash_expression()


def stale_condition(ref: FieldRef, version: str | None = None) -> Q:
    """``Q`` matching rows with no vector, an old encoder version or (if SQL can tell) new text.

    Only meaningful on a queryset annotated by ``stale_queryset``.
    """
    version = version or ref.version()
    condition = (
        Q(**{f"{ref.field.attname}__isnull": True})
        | Q(**{f"{ref.hash_attname}__isnull": True})
        | Q(**{f"{ref.version_attname}__isnull": True})
        | ~Q(**{ref.version_attname: version})
    )
    if _sql_hash(ref) is not None:
        condition |= ~Q(**{ref.hash_attname: models.F("_sbert_current_hash")})
    if getattr(ref.field, "has_passages", False):  # a vector without its passages
        condition |= ~passages_exist(ref.field)
    return condition


def stale_queryset(ref: FieldRef, version: str | None = None) -> models.QuerySet:
    """Rows of ``ref`` that need a vector, in one SQL query.

    Exact for field-name sources. For callable sources it cannot see text edits (only missing
    vectors and old versions); ``iter_stale_pks`` scans those rows in Python as well.
    """
    qs = ref.manager.all()
    expression = _sql_hash(ref)
    if expression is not None:
        qs = qs.annotate(_sbert_current_hash=expression)
    return qs.filter(stale_condition(ref, version))


def has_exact_sql_staleness(ref: FieldRef) -> bool:
    return _sql_hash(ref) is not None


def iter_stale_pks(
    ref: FieldRef,
    *,
    chunk_rows: int = 1000,
    limit: int | None = None,
    leave_skipped: bool = False,
) -> Iterator[list[Pk]]:
    """Yield the primary keys of stale rows, a chunk at a time, in pk order.

    Keyset pagination (``pk > last``) so rows that stay stale (edited again meanwhile) are
    not yielded twice and the walk always ends. ``leave_skipped`` leaves out rows recorded as
    skipped that are unchanged (same text hash and version) and not due for a retry yet.
    """
    version = ref.version()
    if has_exact_sql_staleness(ref):
        qs = stale_queryset(ref, version)
        if leave_skipped:
            qs = qs.exclude(waiting_exists(ref, version, "_sbert_current_hash"))
        found: Iterator[list[Pk]] = pages_by_pk(qs, chunk_rows)
    else:
        pages = pages_by_pk(light_rows(ref, ref.manager.all()), chunk_rows, rows=True)
        found = (_stale_of(ref, version, page, leave_skipped) for page in pages)
    yielded = 0
    for pks in found:
        if limit is not None:
            pks = pks[: limit - yielded]
        if pks:
            yielded += len(pks)
            yield pks
        if limit is not None and yielded >= limit:
            return


def _stale_of(
    ref: FieldRef, version: str, instances: list[models.Model], leave_skipped: bool = False
) -> list[Pk]:
    """The primary keys of the stale rows among ``instances``, checked in Python (a callable
    source). A row whose source raises is stale (its task records it)."""
    waiting = waiting_hashes(ref, [obj.pk for obj in instances], version) if leave_skipped else {}
    stale = []
    for obj in instances:
        text = read_text(ref, obj)
        digest = "" if isinstance(text, RowFailure) else text_hash(text)
        if waiting.get(str(obj.pk)) == digest:
            continue  # skipped before, unchanged since, not due for a retry
        if isinstance(text, RowFailure) or not is_current(ref, obj, digest, version):
            stale.append(obj.pk)
    return stale


def count_stale(ref: FieldRef) -> int:
    if has_exact_sql_staleness(ref):
        return stale_queryset(ref).count()
    return sum(len(chunk) for chunk in iter_stale_pks(ref))


def field_status(ref: FieldRef) -> FieldStatus:
    """Rows, vectors present, vectors missing, stale rows and stored versions for one field."""
    version = ref.version()
    counts = ref.manager.aggregate(
        rows=models.Count("pk"),
        embedded=models.Count("pk", filter=Q(**{f"{ref.field.attname}__isnull": False})),
    )
    versions = dict(
        ref.manager.exclude(**{f"{ref.version_attname}__isnull": True})
        .values_list(ref.version_attname)
        .annotate(n=models.Count("pk"))
        .order_by()
        .values_list(ref.version_attname, "n")
    )
    return FieldStatus(
        ref=ref,
        rows=counts["rows"],
        embedded=counts["embedded"],
        missing=counts["rows"] - counts["embedded"],
        stale=count_stale(ref),
        version=version,
        versions=versions,
        skipped=skipped_rows(ref).count(),
    )
