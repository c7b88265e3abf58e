"""Writing vectors: the live columns, and the side table that stages a version being promoted.

Live writes are guarded against races with concurrent edits: a worker reads a row's text,
encodes it (slow, no locks held), then in one short transaction locks the rows with
``SELECT ... FOR UPDATE``, rebuilds their text and writes a vector only where the text still
hashes to what was encoded. A row edited meanwhile keeps its newer text and the edit's own
task (or the sweep) embeds it; an older vector never overwrites a newer text.

They are also guarded against a promotion's switch: a write whose version stopped serving
because the switch committed meanwhile is refused (``VersionChanged``) under the switch lock.

A batch the database refuses because of one row is written row by row (``failures.py``).

Staged writes put a candidate version's vectors in ``StagedEmbedding`` beside the live ones,
keyed by content type, field, version and primary key; the promotion's switch copies them into
the live columns in one transaction (``finetuning.promotion``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connections, transaction
from django.utils import timezone

from ..fields import text_hash, vector_literal
from ..models import SkipStage, StagedEmbedding
from ..serving import serving_record, switch_lock
from .failures import RowFailure, each_or_alone, read_text, record
from .passages import (
    RowPassages,
    encode_with_passages,
    has_passages,
    replace_passages,
    stage_passages,
    staged_with_passages,
)
from .passages import by_pk as passages_by_pk
from .refs import FieldRef, Pk, content_type_id
from .rows import PendingRow, light_rows, rows_queryset

# --- live writes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteOutcome:
    """What ``write_rows`` did: vectors written, rows skipped (recorded in ``SkippedRow``)."""

    written: int
    skipped: int


def write_rows(
    ref: FieldRef,
    rows: Sequence[PendingRow],
    vectors: np.ndarray,
    version: str | None = None,
    passages: Sequence[RowPassages] | None = None,
) -> WriteOutcome:
    """Store ``vectors[i]`` for ``rows[i]`` where the row's text still hashes to ``rows[i].hash``.

    In one transaction: lock the rows (``SELECT ... FOR UPDATE``, pk order), rebuild their text,
    compare hashes, and write the matching ones with one ``UPDATE ... FROM unnest(...)``. Rows
    edited or deleted since they were read are left alone (their own task or the sweep embeds
    the new text). A row whose source now raises, or whose vector the database refuses, is
    recorded and skipped; the others are written.

    Raises ``VersionChanged`` (and writes nothing) when ``version`` stopped serving because a
    promotion switched versions meanwhile: checked under the switch lock, so no vector of the
    old version lands after the switch. ``passages`` (a field with ``passages=``) replace each
    written row's passages in the same savepoint as its vector.
    """
    if len(rows) != len(vectors):
        raise ValueError(f"{len(rows)} rows but {len(vectors)} vectors.")
    if not rows:
        return WriteOutcome(0, 0)
    version = version or ref.version()
    by_pk = {row.pk: (row, vector) for row, vector in zip(rows, vectors, strict=True)}
    row_passages = passages_by_pk(rows, passages)
    alias = ref.db_alias
    with transaction.atomic(using=alias):
        _check_still_serving(ref, version, alias)
        still_same: list[tuple[Pk, PendingRow, np.ndarray]] = []
        failed: list[RowFailure] = []
        for instance in rows_queryset(ref, by_pk, lock=True):
            row, vector = by_pk[instance.pk]
            text = read_text(ref, instance)
            if isinstance(text, RowFailure):
                failed.append(text)
            elif text_hash(text) == row.hash:
                still_same.append((instance.pk, row, vector))
        written, refused = each_or_alone(
            alias, still_same, lambda items: _write_live(ref, items, version, row_passages)
        )
        failed += [RowFailure(pk, SkipStage.WRITE, exc, row.hash) for (pk, row, _), exc in refused]
        record(ref, failed, version)
    return WriteOutcome(len(written), len(failed))


def write_vectors(
    ref: FieldRef, rows: Sequence[PendingRow], vectors: np.ndarray, version: str | None = None
) -> int:
    """``write_rows`` returning only how many vectors were written."""
    return write_rows(ref, rows, vectors, version).written


class VersionChanged(Exception):
    """The version rows were encoded with stopped serving before they were written."""

    def __init__(self, ref: FieldRef, encoded: str, serving: str) -> None:
        super().__init__(f"{ref}: encoded with {encoded!r} but {serving!r} serves now.")
        self.serving = serving


def _check_still_serving(ref: FieldRef, version: str, alias: str) -> None:
    """Inside the write transaction: hold the switch lock (shared) and re-read the serving
    version from the database (the truth on every host, whatever files this one has)."""
    switch_lock(ref.encoder_name, shared=True, using=alias)
    current = serving_record(ref.encoder_name, max_age=0, using=alias).version
    if current != version:
        raise VersionChanged(ref, version, current)


def _write_live(
    ref: FieldRef,
    items: Sequence[tuple[Pk, PendingRow, np.ndarray]],
    version: str,
    row_passages: dict[Pk, RowPassages],
) -> None:
    """The rows' vectors and bookkeeping, and their passages when the field has them."""
    _update_rows(ref, items, version)
    if row_passages:
        replace_passages(ref, [(pk, row_passages[pk]) for pk, _, _ in items])


def _update_rows(
    ref: FieldRef, items: Sequence[tuple[Pk, PendingRow, np.ndarray]], version: str
) -> None:
    """One UPDATE for many rows: vectors and bookkeeping, joined on the primary key."""
    connection = connections[ref.db_alias]
    opts = ref.model._meta
    quote = connection.ops.quote_name
    column = {f.attname: f.column for f in opts.concrete_fields}
    pk_type = opts.pk.db_type(connection)
    vector_type = ref.field.db_type(connection)
    table = quote(opts.db_table)
    sql = (
        f"UPDATE {table} SET {quote(column[ref.field.attname])} = v.vec::{vector_type}, "
        f"{quote(column[ref.hash_attname])} = v.hash, "
        f"{quote(column[ref.version_attname])} = %s, "
        f"{quote(column[ref.updated_at_attname])} = %s "
        f"FROM unnest(%s::{pk_type}[], %s::text[], %s::text[]) AS v(pk, hash, vec) "
        f"WHERE {table}.{quote(opts.pk.column)} = v.pk"
    )
    params = [
        version,
        timezone.now(),
        [opts.pk.get_db_prep_value(pk, connection) for pk, _, _ in items],
        [row.hash for _, row, _ in items],
        [vector_literal(vector) for _, _, vector in items],
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


# --- staged writes (a version being promoted) ---------------------------------------------


def stage_vectors(
    ref: FieldRef,
    rows: Sequence[PendingRow],
    vectors: np.ndarray,
    version: str,
    passages: Sequence[RowPassages] | None = None,
) -> int:
    """Upsert ``vectors[i]`` as the ``version`` vector of ``rows[i]`` in the side table.

    Returns how many were staged; a row whose vector the database refuses is recorded and
    skipped, and the others are staged. ``passages`` are staged with their rows, in the same
    savepoint.
    """
    if not rows:
        return 0
    items = list(zip(rows, vectors, strict=True))
    row_passages = passages_by_pk(rows, passages)
    with transaction.atomic(using=ref.db_alias):
        staged, refused = each_or_alone(
            ref.db_alias,
            items,
            lambda part: _stage_part(ref, part, version, row_passages),
        )
        failures = [RowFailure(row.pk, SkipStage.STAGE, exc, row.hash) for (row, _), exc in refused]
        record(ref, failures, version)
    return len(staged)


def _stage_part(
    ref: FieldRef,
    items: Sequence[tuple[PendingRow, np.ndarray]],
    version: str,
    row_passages: dict[Pk, RowPassages],
) -> None:
    _insert_staged(ref, items, version)
    if row_passages:
        stage_passages(ref, [(row.pk, row_passages[row.pk]) for row, _ in items], version)


def _insert_staged(
    ref: FieldRef, items: Sequence[tuple[PendingRow, np.ndarray]], version: str
) -> None:
    connection = connections[ref.db_alias]
    table = connection.ops.quote_name(StagedEmbedding._meta.db_table)
    sql = (
        f"INSERT INTO {table} (content_type_id, object_pk, field, version, vector, text_hash, "
        "created_at) SELECT %s, v.pk, %s, %s, v.vec::vector, v.hash, %s "
        "FROM unnest(%s::text[], %s::text[], %s::text[]) AS v(pk, hash, vec) "
        "ON CONFLICT (content_type_id, field, version, object_pk) DO UPDATE SET "
        "vector = EXCLUDED.vector, text_hash = EXCLUDED.text_hash, created_at = EXCLUDED.created_at"
    )
    params = [
        content_type_id(ref),
        ref.name,
        version,
        timezone.now(),
        [str(row.pk) for row, _ in items],
        [row.hash for row, _ in items],
        [vector_literal(vector) for _, vector in items],
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def stage_pending(
    ref: FieldRef,
    rows: Sequence[PendingRow],
    version: str,
    batch_size: int | None = None,
) -> int:
    """Encode ``rows`` with ``version`` and stage the vectors (rows saved during a promotion)."""
    vectors, passages = encode_with_passages(ref, rows, batch_size, version)
    return stage_vectors(ref, rows, vectors, version, passages)


def unstaged(ref: FieldRef, pks: Sequence[Any], version: str) -> list[PendingRow]:
    """Rows among ``pks`` with no ``version`` vector staged from their current text.

    A row whose source raises is recorded and left out.
    """
    staged = dict(
        StagedEmbedding.objects.using(ref.db_alias)
        .filter(
            content_type_id=content_type_id(ref),
            field=ref.name,
            version=version,
            object_pk__in=[str(pk) for pk in pks],
        )
        .values_list("object_pk", "text_hash")
    )
    if has_passages(ref):  # a row vector staged without its passages is staged again
        with_passages = staged_with_passages(ref, list(staged), version)
        staged = {pk: digest for pk, digest in staged.items() if pk in with_passages}
    live = light_rows(ref, ref.manager.filter(pk__in=list(pks)).order_by("pk"))
    pending = []
    failed: list[RowFailure] = []
    for instance in live:
        text = read_text(ref, instance)
        if isinstance(text, RowFailure):
            failed.append(text)
            continue
        digest = text_hash(text)
        if staged.get(str(instance.pk)) != digest:
            pending.append(PendingRow(instance.pk, text, digest))
    record(ref, failed, version)
    return pending
