"""Loading rows with vectors computed elsewhere: another vector store, a notebook, a benchmark.

::

    from django_sbert.indexing import bulk_load

    articles = [Article(title=t, body=b) for t, b in rows]
    bulk_load(articles, vectors)              # vectors: (len(articles), dims) float array

A field with fewer ``dimensions`` than its encoder (Matryoshka) takes the encoder's full vectors
too, and stores them cut to its size and re-normalized, as its own writes do.

The rows are written with PostgreSQL's ``COPY`` (psycopg's ``cursor.copy``), a million rows in
minutes, together with each vector's bookkeeping: the hash of the row's text and the encoder
version. So the rows are searchable by text at once, and the sweep does not encode them again.

What is refused, before anything is written (docs/scale.md, "Loading precomputed vectors"):
a vector of the wrong size or not finite, a count that does not match the rows, a ``version``
the encoder does not serve, a field with ``passages=``, and a load while a version is being
promoted (``PromotionRefused``). A load running when a promotion starts stops at its next
``COPY_CHUNK_ROWS`` rows, writes nothing and raises the same, so the switch never waits behind
a long COPY.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from django.core.management.color import no_style
from django.db import connections, models, transaction
from django.utils import timezone

from ..exceptions import PromotionRefused
from ..fields import EmbeddingField, embedding_fields, text_hash, vector_literal
from ..models import EncoderVersion, VersionStatus
from ..serving import serving_record, switch_lock
from .refs import FieldRef, field_refs

# Rows per COPY statement: between two, bulk_load() gives way to a promotion that began.
COPY_CHUNK_ROWS = 10_000


def bulk_load(
    objs: Sequence[models.Model],
    vectors: Any,
    *,
    field: str | None = None,
    version: str | None = None,
    using: str | None = None,
) -> int:
    """Insert the unsaved instances ``objs`` (one model) with ``vectors[i]`` as the vector of
    ``objs[i]``, by COPY, in one transaction; returns the number of rows written.

    ``field`` names the EmbeddingField when the model has several. ``version`` is the encoder
    version that computed the vectors; None means the version the encoder serves now, which is
    the only one accepted (a fine-tuned version's vectors are loaded after its promotion). Like
    ``bulk_create()``, no signal is sent; unlike it, primary keys are not set on ``objs``.
    Instances that carry a primary key are inserted with it, and the table's sequence is moved
    past the largest.
    """
    objs = list(objs)
    if not objs:
        return 0
    model = type(objs[0])._meta.concrete_model
    if any(type(obj)._meta.concrete_model is not model for obj in objs):
        raise ValueError("bulk_load() takes instances of one model at a time.")
    ref = _field_ref(model, field)
    array = _checked_vectors(ref, vectors, len(objs))
    alias = using or ref.db_alias
    connection = connections[alias]
    opts = model._meta
    with_pk = objs[0].pk is not None
    if any((obj.pk is not None) != with_pk for obj in objs):
        raise ValueError("Give every instance a primary key, or none of them.")
    columns = [
        f for f in opts.local_concrete_fields if not f.generated and (with_pk or f is not opts.pk)
    ]
    if not all(f.model._meta.concrete_model is model for f in opts.concrete_fields):
        raise ValueError(
            f"{opts.label} inherits fields from a parent table (multi-table inheritance); "
            "bulk_load() writes one table. Load the parent model's rows instead."
        )
    quote = connection.ops.quote_name
    sql = f"COPY {quote(opts.db_table)} ({', '.join(quote(f.column) for f in columns)}) FROM STDIN"
    now = timezone.now()
    with transaction.atomic(using=alias):
        version = _serving_version(ref, version, alias)
        for start in range(0, len(objs), COPY_CHUNK_ROWS):
            # One COPY per chunk, and between chunks a look for a promotion that began
            # meanwhile: this transaction holds the switch lock shared, so its switch would
            # wait for the whole load (and every indexing write behind the switch).
            if start:
                _refuse_during_promotion(ref, alias)
            with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
                end = start + COPY_CHUNK_ROWS
                for obj, vector in zip(objs[start:end], array[start:end], strict=True):
                    values = _bookkeeping(ref.field, obj, vector, version, now)
                    copy.write_row(
                        [
                            values[f.attname]
                            if f.attname in values
                            else f.get_db_prep_save(f.pre_save(obj, add=True), connection)
                            for f in columns
                        ]
                    )
        if with_pk:
            _move_sequence(connection, model)
    return len(objs)


def _field_ref(model: type[models.Model], name: str | None) -> FieldRef:
    refs = [ref for ref in field_refs(model) if name is None or ref.name == name]
    if len(refs) == 1:
        if refs[0].field.passage_config is not None:
            raise ValueError(
                f"{refs[0]} indexes its text by passages, which bulk_load() cannot compute: "
                "create the rows and run manage.py sbert_reindex (or let the workers embed "
                "them)."
            )
        return refs[0]
    names = ", ".join(f.name for f in embedding_fields(model)) or "none"
    if name is None and len(refs) > 1:
        raise ValueError(f"{model._meta.label} has several EmbeddingFields ({names}); pass field=.")
    raise ValueError(f"{model._meta.label} has no EmbeddingField {name!r} (it has: {names}).")


def _checked_vectors(ref: FieldRef, vectors: Any, rows: int) -> np.ndarray:
    """``vectors`` as a (rows, dims) float32 array, or a ValueError that says what is wrong."""
    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"vectors must be a 2-D array of numbers: {exc}") from exc
    if array.ndim != 2:
        raise ValueError(f"vectors must be a 2-D array (one vector per row), not {array.shape}.")
    try:
        # The field's size, or on a truncating field its encoder's full vectors, cut to it.
        fitted = ref.field.fit_vectors(array)
    except ValueError as exc:
        raise ValueError(
            f"{exc} The vectors given have shape {array.shape}: encode the texts with encoder "
            f"{ref.encoder_name!r} (or the model it was configured with)."
        ) from None
    if array.shape[0] != rows:
        raise ValueError(f"{rows} rows but {array.shape[0]} vectors: give one vector per row.")
    if not np.isfinite(array).all():
        bad = int(np.flatnonzero(~np.isfinite(array).all(axis=1))[0])
        raise ValueError(f"The vector of row {bad} holds NaN or infinite values.")
    return fitted


def _refuse_during_promotion(ref: FieldRef, alias: str) -> None:
    """``PromotionRefused`` while a version of ``ref``'s encoder is being promoted: the rows
    would get the outgoing version's vectors and none staged for the incoming one."""
    promoting = (
        EncoderVersion.objects.using(alias)
        .filter(encoder_name=ref.encoder_name, status=VersionStatus.PROMOTING)
        .values_list("version", flat=True)
        .first()
    )
    if promoting is not None:
        raise PromotionRefused(
            f"bulk_load() refused: version {promoting!r} of encoder {ref.encoder_name!r} is "
            "being promoted, and rows loaded now would carry the outgoing version's vectors "
            "(nothing was written). Load after the switch, with vectors of the new version, "
            "or stop the promotion first."
        )


def _serving_version(ref: FieldRef, version: str | None, alias: str) -> str:
    """The serving version, read under the switch lock (shared, like every live write), so no
    promotion's switch commits between the check and the COPY; refused during a promotion."""
    switch_lock(ref.encoder_name, shared=True, using=alias)
    _refuse_during_promotion(ref, alias)
    current = serving_record(ref.encoder_name, max_age=0).version
    if version is not None and version != current:
        raise ValueError(
            f"The vectors were computed by version {version!r} but encoder "
            f"{ref.encoder_name!r} serves {current!r}: rows loaded with them would be stale "
            "(left out of text searches, then re-encoded). Load vectors of the serving "
            "version, or leave version= out when they are."
        )
    return current


def _bookkeeping(
    field: EmbeddingField, obj: models.Model, vector: np.ndarray, version: str, now: Any
) -> dict[str, Any]:
    """The vector and its hash, version and time, by attname, as COPY writes them."""
    return {
        field.attname: vector_literal(vector),
        field.hash_field_name: text_hash(field.get_source_text(obj)),
        field.version_field_name: version,
        field.updated_at_field_name: now,
    }


def _move_sequence(connection: Any, model: type[models.Model]) -> None:
    """Move the primary key's sequence past the largest key (rows inserted with their keys)."""
    with connection.cursor() as cursor:
        for statement in connection.ops.sequence_reset_sql(no_style(), [model]):
            cursor.execute(statement)
