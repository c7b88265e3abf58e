"""Reading rows for indexing: their text, its hash, whether their vector is current, and
encoding the ones that are not.

Rows are read without their vector (parsing hundreds of floats per row is wasted work here)
and annotated with whether they have one. A row whose source raises is recorded and skipped
(``failures.py``); the others go on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import models
from django.db.models import Q

from ..conf import encoder_config
from ..fields.columns import text_hash
from ..passages import config as passage_config
from ..passages import passages_exist
from ..serving import get_encoder, role_prompt
from .failures import RowFailure, read_text, record
from .refs import FieldRef, Pk


@dataclass
class EmbedStats:
    """What one call did, row by row; ``+`` adds two of them up."""

    examined: int = 0  # rows asked for that still exist
    up_to_date: int = 0  # skipped: vector present, same text hash, same encoder version
    embedded: int = 0  # vectors written
    changed: int = 0  # encoded, but the row's text changed before the write: not written
    missing: int = 0  # asked for but deleted
    skipped: int = 0  # not embedded: its source raised or the database refused its vector

    def __add__(self, other: EmbedStats) -> EmbedStats:
        return EmbedStats(
            *(getattr(self, name) + getattr(other, name) for name in self.__dataclass_fields__)
        )


@dataclass(frozen=True)
class PendingRow:
    """A row whose text was read and hashed, waiting to be encoded."""

    pk: Pk
    text: str
    hash: str


def _source_fields(ref: FieldRef) -> tuple[str, ...] | None:
    return getattr(ref.field, "source_fields", None)


def light_rows(ref: FieldRef, qs: models.QuerySet) -> models.QuerySet:
    """Rows without their vector (parsing hundreds of floats per row is wasted work here),
    annotated with whether they have one."""
    sources = _source_fields(ref)
    if sources:
        # Field-name sources: load only what the text and the bookkeeping need.
        qs = qs.only(*sources, ref.hash_attname, ref.version_attname)
    else:
        qs = qs.defer(ref.field.attname)
    # A field with passages=: its passages too (passages_exist is empty for other fields).
    has_vector = models.ExpressionWrapper(
        Q(**{f"{ref.field.attname}__isnull": False}) & passages_exist(ref.field),
        output_field=models.BooleanField(),
    )
    return qs.annotate(_sbert_has_vector=has_vector)


def rows_queryset(ref: FieldRef, pks: Iterable[Pk], *, lock: bool = False) -> models.QuerySet:
    qs = light_rows(ref, ref.manager.filter(pk__in=list(pks)).order_by("pk"))
    if lock:
        # Locked in pk order, so two workers writing overlapping rows cannot deadlock.
        qs = qs.select_for_update(of=("self",))
    return qs


def is_current(ref: FieldRef, instance: models.Model, digest: str, version: str) -> bool:
    """Vector present, made from this text (hash) by this encoder (version)."""
    return (
        instance._sbert_has_vector
        and getattr(instance, ref.hash_attname) == digest
        and getattr(instance, ref.version_attname) == version
    )


def read_pending(
    ref: FieldRef, pks: Iterable[Pk], *, force: bool = False, version: str | None = None
) -> tuple[list[PendingRow], EmbedStats]:
    """Read rows ``pks``, build and hash their text, and keep those that need a vector.

    With ``force`` every existing row is kept (re-embedding with an unchanged encoder). A row
    whose source raises is logged, recorded (``SkippedRow``) and counted in ``stats.skipped``.
    """
    wanted = list(dict.fromkeys(pks))
    version = version or ref.version()
    stats = EmbedStats()
    pending: list[PendingRow] = []
    failed: list[RowFailure] = []
    for instance in rows_queryset(ref, wanted):
        stats.examined += 1
        text = read_text(ref, instance)
        if isinstance(text, RowFailure):
            failed.append(text)
            continue
        digest = text_hash(text)
        if not force and is_current(ref, instance, digest, version):
            stats.up_to_date += 1
            continue
        pending.append(PendingRow(instance.pk, text, digest))
    stats.missing = len(wanted) - stats.examined
    stats.skipped = len(failed)
    record(ref, failed, version)
    return pending, stats


def encode_rows(
    ref: FieldRef,
    rows: Sequence[PendingRow],
    batch_size: int | None = None,
    version: str | None = None,
) -> np.ndarray:
    """Encode the rows' texts with the field's encoder: unit vectors, ``(n, dims)`` float32,
    at the field's size (``dims`` below the encoder's: cut and re-normalized).

    Each text gets the encoder's document prompt (``serving.role_prompt``).
    ``version`` picks a version of the encoder (default: the serving one). With
    ``LONG_TEXT="chunk"`` a text counts at most ``passages.config.MAX_CHUNKS`` windows, so no
    row's text can make a task (and its redelivery) run out of memory.
    """
    config = encoder_config(ref.encoder_name)
    max_chunks = passage_config.MAX_CHUNKS
    model = get_encoder(ref.encoder_name, version)
    vectors = model.encode(
        [row.text for row in rows],
        batch_size=int(batch_size or config["BATCH_SIZE"]),
        normalize=True,
        long_text=config["LONG_TEXT"],
        max_chunks=int(max_chunks) if max_chunks is not None else None,
        # DOCUMENT_PROMPT, else the model's document/passage prompt (part of the version id).
        prompt=role_prompt(ref.encoder_name, "document", model),
    )
    # A field with fewer dimensions than the encoder (Matryoshka) stores them cut and
    # re-normalized; the query side cuts its vectors the same way (fields.fit_vectors).
    return ref.field.fit_vectors(vectors)


def pages_by_pk(qs: models.QuerySet, size: int, *, rows: bool = False) -> Iterator[list[Any]]:
    """The rows of ``qs`` in primary-key order, ``size`` at a time: their primary keys, or
    with ``rows`` the model instances ``qs`` yields.

    Keyset pagination: each page is read with ``pk > last`` of the page before, not OFFSET,
    so a page costs the same at the end of a big table as at its start, no list of every key
    is held in memory, and each row is visited at most once (a row that still matches when
    the next page is read is not seen again).
    """
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size!r}.")
    ordered = qs.order_by("pk") if rows else qs.order_by("pk").values_list("pk", flat=True)
    last: Pk | None = None
    while True:
        page = list((ordered if last is None else ordered.filter(pk__gt=last))[:size])
        if not page:
            return
        yield page
        if len(page) < size:  # the last page: asking again would find nothing
            return
        last = page[-1].pk if rows else page[-1]


def chunks(items: Sequence[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in consecutive lists of at most ``size``."""
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
