"""Rows of a field with ``passages=``: split, encode, write and stage their passages.

The indexing rules are the field's own (``embed.py``, ``writes.py``): a chunk of rows is read
and hashed, encoded without locks, then written in one short transaction only where the text
still hashes to what was encoded and the version still serves. For such a field, encoding a
row means splitting its text into passages (``encoder.passages``, with the serving version's
own tokenizer and document prompt), encoding every passage, and deriving the row's own vector
from them (the normalized mean, or the first passage's vector: ``PassageConfig.document``).
The write then replaces the row's passages in the same savepoint as its vector, so a row's
vector, hash, version and passages always belong together; a staged write (a version being
promoted) stages the passages beside the row's ``StagedEmbedding`` the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from django.db import connections

from ..encoder.passages import Passage, passages_of
from ..fields.columns import vector_literal
from ..models import StagedPassage
from ..passages import passage_limit
from ..serving import get_encoder, role_prompt
from .refs import FieldRef, Pk, content_type_id
from .rows import PendingRow, chunks, encode_rows

logger = logging.getLogger(__name__)

# Memory bounds of one chunk of rows with passages (docs/security.md, "Memory of indexing"):
# passages encoded per call of the encoder, and passages written per INSERT (each vector goes
# as text: about 4 KB at 384 dimensions, so 1000 passages are a 4 MB statement).
ENCODE_PASSAGES = 2048
WRITE_PASSAGES = 1000


@dataclass(frozen=True)
class RowPassages:
    """One row's passages and their unit vectors, ``vectors[i]`` for ``passages[i]``."""

    passages: list[Passage]
    vectors: np.ndarray  # (len(passages), dims) float32


def has_passages(ref: FieldRef) -> bool:
    return bool(getattr(ref.field, "has_passages", False))


def field_passage_limit(ref: FieldRef) -> int:
    """Passages per row at most for ``ref`` (``passages.passage_limit``): the field's
    ``max_passages``, else as many as hold the text of the encoder's ``MAX_CHUNKS`` windows."""
    return passage_limit(ref.field.passage_config, ref.encoder_name)


def split_rows(
    ref: FieldRef, texts: Sequence[str], version: str | None = None
) -> list[list[Passage]]:
    """Each text's passages, as the field's settings and the version's tokenizer cut them."""
    config = ref.field.passage_config
    model = get_encoder(ref.encoder_name, version)
    return passages_of(
        model.tokenizer,
        texts,
        max_tokens=config.max_tokens,
        overlap=config.overlap,
        max_passages=field_passage_limit(ref),
        # The passages are encoded with the document prompt: it takes room in the window.
        prompt=role_prompt(ref.encoder_name, "document", model),
    )


def encode_with_passages(
    ref: FieldRef,
    rows: Sequence[PendingRow],
    batch_size: int | None = None,
    version: str | None = None,
) -> tuple[np.ndarray, list[RowPassages] | None]:
    """The rows' own vectors ``(n, dims)``, and for a field with passages each row's passages.

    A field without passages is encoded as always (``rows.encode_rows``) with None for the
    passages. With passages, every passage of every row is encoded in one call (sorted into
    batches by length like any texts), and the row's vector is derived from its passages.
    """
    if not has_passages(ref):
        return encode_rows(ref, rows, batch_size, version), None
    split = split_rows(ref, [row.text for row in rows], version)
    _log_capped(ref, rows, split)
    flat = [
        PendingRow(row.pk, passage.text, row.hash)
        for row, passages in zip(rows, split, strict=True)
        for passage in passages
    ]
    # (total passages, dims), unit; encoded ENCODE_PASSAGES at a time, so the tokens of a
    # chunk's passages are never all held at once.
    vectors = np.concatenate(
        [encode_rows(ref, part, batch_size, version) for part in chunks(flat, ENCODE_PASSAGES)]
        or [np.empty((0, ref.field.get_dimensions()), dtype=np.float32)]
    )
    out: list[RowPassages] = []
    start = 0
    for passages in split:
        out.append(RowPassages(passages, vectors[start : start + len(passages)]))
        start += len(passages)
    document = ref.field.passage_config.document
    return np.stack([document_vector(item.vectors, document) for item in out]), out


def document_vector(vectors: np.ndarray, document: str = "mean") -> np.ndarray:
    """The row's own vector from its passage vectors: their normalized mean, or the first."""
    vector = vectors[0] if document == "first" else vectors.mean(axis=0)
    return (vector / max(float(np.linalg.norm(vector)), 1e-12)).astype(np.float32)


def _log_capped(ref: FieldRef, rows: Sequence[PendingRow], split: list[list[Passage]]) -> None:
    limit = field_passage_limit(ref)
    capped = sum(
        1
        for row, passages in zip(rows, split, strict=True)
        if len(passages) >= limit and passages[-1].end < len(row.text.rstrip())
    )
    if capped:
        logger.warning(
            "%s: %d of %d text(s) run past %d passages; the rest of each is not indexed "
            "(PassageConfig.max_passages, else MAX_CHUNKS).",
            ref,
            capped,
            len(rows),
            limit,
        )


# --- writes (called inside the write transaction of writes.py) --------------------------------


def _quoted(ref: FieldRef) -> tuple[str, dict[str, str], str]:
    """The passage table, its columns, and the row's primary key type, quoted for SQL."""
    connection = connections[ref.db_alias]
    model = ref.field.passage_model
    quote = connection.ops.quote_name
    columns = {f.name: quote(f.column) for f in model._meta.concrete_fields}
    pk_type = ref.model._meta.pk.db_type(connection)
    return quote(model._meta.db_table), columns, pk_type


def _flatten(
    items: Sequence[tuple[Pk, RowPassages]], size: int = WRITE_PASSAGES
) -> Iterator[tuple[list, ...]]:
    """The passages of ``items`` as columns, ``size`` passages at a time: the vectors' text
    of one batch at most is held (and sent) at once."""
    columns: tuple[list, ...] = ([], [], [], [], [], [])
    for pk, row in items:
        for ordinal, (passage, vector) in enumerate(zip(row.passages, row.vectors, strict=True)):
            pks, ordinals, starts, ends, texts, vectors = columns
            pks.append(pk)
            ordinals.append(ordinal)
            starts.append(passage.start)
            ends.append(passage.end)
            texts.append(passage.text)
            vectors.append(vector_literal(vector))
            if len(pks) >= size:
                yield columns
                columns = ([], [], [], [], [], [])
    if columns[0]:
        yield columns


def replace_passages(ref: FieldRef, items: Sequence[tuple[Pk, RowPassages]]) -> None:
    """Replace the live passages of the rows ``items`` names: one DELETE, then INSERTs of
    ``WRITE_PASSAGES`` passages each.

    Called in the savepoint that writes the rows' vectors, so they commit (or fail) as one.
    """
    if not items:
        return
    connection = connections[ref.db_alias]
    table, col, pk_type = _quoted(ref)
    opts = ref.model._meta
    row_pks = [opts.pk.get_db_prep_value(pk, connection) for pk, _ in items]
    vector_type = ref.field.passage_model._meta.get_field("vector").db_type(connection)
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE {col['row']} = ANY(%s::{pk_type}[])", [row_pks])
        for pks, ordinals, starts, ends, texts, vectors in _flatten(items):
            pks = [opts.pk.get_db_prep_value(pk, connection) for pk in pks]
            cursor.execute(
                f"INSERT INTO {table} ({col['row']}, {col['ordinal']}, {col['start']}, "
                f"{col['end']}, {col['text']}, {col['vector']}) SELECT v.pk, v.ordinal, "
                f"v.start, v.end, v.text, v.vec::{vector_type} FROM unnest(%s::{pk_type}[], "
                "%s::int[], %s::int[], %s::int[], %s::text[], %s::text[]) "
                'AS v(pk, ordinal, start, "end", text, vec)',
                [pks, ordinals, starts, ends, texts, vectors],
            )


def stage_passages(ref: FieldRef, items: Sequence[tuple[Pk, RowPassages]], version: str) -> None:
    """Stage the rows' ``version`` passages beside their ``StagedEmbedding`` (replacing any)."""
    if not items:
        return
    connection = connections[ref.db_alias]
    table = connection.ops.quote_name(StagedPassage._meta.db_table)
    ct = content_type_id(ref)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE content_type_id = %s AND field = %s AND version = %s "
            "AND object_pk = ANY(%s::text[])",
            [ct, ref.name, version, [str(pk) for pk, _ in items]],
        )
        for pks, ordinals, starts, ends, texts, vectors in _flatten(items):
            object_pks = [str(pk) for pk in pks]
            cursor.execute(
                f"INSERT INTO {table} (content_type_id, object_pk, field, version, ordinal, "
                'start, "end", text, vector) SELECT %s, v.pk, %s, %s, v.ordinal, v.start, '
                "v.end, v.text, v.vec::vector FROM unnest(%s::text[], %s::int[], %s::int[], "
                '%s::int[], %s::text[], %s::text[]) AS v(pk, ordinal, start, "end", text, vec)',
                [ct, ref.name, version, object_pks, ordinals, starts, ends, texts, vectors],
            )


def by_pk(
    rows: Sequence[PendingRow], passages: Sequence[RowPassages] | None
) -> dict[Pk, RowPassages]:
    """``{pk: passages}`` for rows encoded with ``encode_with_passages`` ({} without)."""
    if passages is None:
        return {}
    return {row.pk: item for row, item in zip(rows, passages, strict=True)}


def staged_with_passages(ref: FieldRef, pks: Sequence[str], version: str) -> set[str]:
    """Which of ``pks`` (as text) have ``version`` passages staged: a staged row vector
    without them (staged before the field had passages) is staged again."""
    return set(
        StagedPassage.objects.using(ref.db_alias)
        .filter(
            content_type_id=content_type_id(ref),
            field=ref.name,
            version=version,
            object_pk__in=list(pks),
        )
        .values_list("object_pk", flat=True)
        .distinct()
    )


def passage_rows(ref: FieldRef, pk: Pk) -> list[dict]:
    """One row's live passages in order: ordinal, start, end, text (the admin lists them)."""
    model = ref.field.passage_model
    if model is None:
        return []
    return list(
        model._default_manager.using(ref.db_alias)
        .filter(row_id=pk)
        .order_by("ordinal")
        .values("ordinal", "start", "end", "text")
    )


__all__ = [
    "RowPassages",
    "by_pk",
    "document_vector",
    "encode_with_passages",
    "field_passage_limit",
    "has_passages",
    "passage_rows",
    "replace_passages",
    "split_rows",
    "stage_passages",
    "staged_with_passages",
]
