"""Turn saved rows into stored vectors, and find the rows whose vector is missing or stale.

Everything here is plain Django + the encoder; Celery tasks, signal handlers and management
commands are thin callers of these functions.

Bookkeeping lives in three companion columns that ``EmbeddingField`` adds beside each vector:

``<name>_hash``
    sha256 of the text the stored vector was computed from.
``<name>_version``
    ``encoder_version()`` of the model that computed it.
``<name>_updated_at``
    when it was written.

A row is *stale* when its vector is NULL, or the hash of its current text differs from
``<name>_hash``, or ``<name>_version`` differs from the current encoder's version. When the
field's source is a tuple of field names, PostgreSQL computes the hash of the current text
itself (``EmbeddingField.sql_text_hash_expression()``), so "which rows are stale" is one query
that also catches ``queryset.update()`` and raw SQL edits. A callable source can only be
evaluated in Python, so those fields are scanned in batches.

Writing a vector is guarded against races with concurrent edits: a worker reads a row's text,
encodes it (slow, no locks held), then in one short transaction locks the rows with
``SELECT ... FOR UPDATE``, rebuilds their text and writes a vector only where the text still
hashes to what was encoded. A row edited meanwhile keeps its newer text and the edit's own
task (or the sweep) embeds it; an older vector never overwrites a newer text.

Versions (docs/fine-tuning.md): "the current encoder" is the encoder's *serving* version
(``versions.serving``). While a new version is being promoted, rows embedded here are also
encoded with it and staged (``promotion.stage_pending``); a write whose version stopped serving
because the switch committed meanwhile is refused under the switch lock and the chunk is
encoded again with the new version.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, models, router, transaction
from django.db.models import Q
from django.utils import timezone

from .conf import encoder_config
from .fields import EmbeddingField, all_embedding_fields, embedding_fields, text_hash

logger = logging.getLogger(__name__)

Pk = Any  # a primary key value: int, str, UUID...
Progress = Callable[[int], Any]  # called with the number of rows just handled (tqdm.update)

# Rows read, encoded and written per step of embed_pks(): each step is one short write
# transaction, so a killed worker loses at most one step's work.
DEFAULT_CHUNK_ROWS = 256


@dataclass(frozen=True)
class FieldRef:
    """One ``EmbeddingField`` on one concrete model: what every indexing function works on."""

    model: type[models.Model]
    field: EmbeddingField

    @property
    def label(self) -> str:
        """``app_label.ModelName``, the form Celery task arguments and commands use."""
        return self.model._meta.label

    @property
    def name(self) -> str:
        return self.field.name

    def __str__(self) -> str:
        return f"{self.label}.{self.name}"

    @property
    def hash_attname(self) -> str:
        return self.field.hash_field_name

    @property
    def version_attname(self) -> str:
        return self.field.version_field_name

    @property
    def updated_at_attname(self) -> str:
        return self.field.updated_at_field_name

    @property
    def encoder_name(self) -> str:
        return self.field.encoder

    @property
    def db_alias(self) -> str:
        return router.db_for_write(self.model)

    @property
    def manager(self) -> models.Manager:
        # The base manager: a custom default manager may hide rows that still need vectors.
        return self.model._base_manager.db_manager(self.db_alias)

    def version(self) -> str:
        """The version string of the encoder this field uses now."""
        from .encoders import encoder_version

        return encoder_version(self.encoder_name)


@dataclass
class EmbedStats:
    """What one call did, row by row; ``+`` adds two of them up."""

    examined: int = 0  # rows asked for that still exist
    up_to_date: int = 0  # skipped: vector present, same text hash, same encoder version
    embedded: int = 0  # vectors written
    changed: int = 0  # encoded, but the row's text changed before the write: not written
    missing: int = 0  # asked for but deleted

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


# --- finding fields ------------------------------------------------------------------------


def field_refs(model: type[models.Model] | None = None) -> list[FieldRef]:
    """Every embedding field of ``model``, or of every installed model, each table once.

    A field inherited through multi-table inheritance lives in (and is indexed on) the parent
    model's table, so its ref names the parent.
    """
    if model is None:
        return [FieldRef(m, f) for m, f in all_embedding_fields()]
    refs: list[FieldRef] = []
    for f in embedding_fields(model):
        owner = model if f.model._meta.concrete_model is model._meta.concrete_model else f.model
        owner = owner._meta.concrete_model  # a proxy shares its concrete model's table
        if FieldRef(owner, f) not in refs:
            refs.append(FieldRef(owner, f))
    return refs


def get_ref(model_label: str, field_name: str) -> FieldRef:
    """Resolve the ``("app_label.Model", "field")`` pair that tasks receive."""
    try:
        model = apps.get_model(model_label)
    except (LookupError, ValueError) as exc:
        raise LookupError(
            f"No installed model {model_label!r} (expected 'app_label.Model')."
        ) from exc
    for ref in field_refs(model):
        if ref.name == field_name:
            return ref
    names = ", ".join(ref.name for ref in field_refs(model)) or "none"
    raise LookupError(
        f"{model_label}.{field_name} is not an EmbeddingField; {model_label} has: {names}."
    )


def resolve_targets(targets: Sequence[str] = ()) -> list[FieldRef]:
    """Turn ``["app.Model", "app.Model.field"]`` (or nothing: every field) into field refs."""
    if not targets:
        return field_refs()
    refs: list[FieldRef] = []
    for target in targets:
        parts = target.split(".")
        if len(parts) not in (2, 3):
            raise LookupError(f"{target!r}: expected app_label.Model or app_label.Model.field.")
        label = ".".join(parts[:2])
        try:
            model = apps.get_model(label)
        except (LookupError, ValueError) as exc:
            raise LookupError(f"{target!r}: no installed model {label!r}.") from exc
        found = field_refs(model)
        if len(parts) == 3:
            found = [get_ref(label, parts[2])]
        elif not found:
            raise LookupError(f"{target!r}: {label} has no EmbeddingField.")
        refs.extend(ref for ref in found if ref not in refs)
    return refs


# --- reading rows and texts ----------------------------------------------------------------


def _source_fields(ref: FieldRef) -> tuple[str, ...] | None:
    return getattr(ref.field, "source_fields", None)


def _light_rows(ref: FieldRef, qs: models.QuerySet) -> models.QuerySet:
    """Rows without their vector (parsing hundreds of floats per row is wasted work here),
    annotated with whether they have one."""
    sources = _source_fields(ref)
    if sources:
        # Field-name sources: load only what the text and the bookkeeping need.
        qs = qs.only(*sources, ref.hash_attname, ref.version_attname)
    else:
        qs = qs.defer(ref.field.attname)
    has_vector = models.ExpressionWrapper(
        Q(**{f"{ref.field.attname}__isnull": False}), output_field=models.BooleanField()
    )
    return qs.annotate(_sbert_has_vector=has_vector)


def _rows_queryset(ref: FieldRef, pks: Iterable[Pk], *, lock: bool = False) -> models.QuerySet:
    qs = _light_rows(ref, ref.manager.filter(pk__in=list(pks)).order_by("pk"))
    if lock:
        # Locked in pk order, so two workers writing overlapping rows cannot deadlock.
        qs = qs.select_for_update(of=("self",))
    return qs


def _is_current(ref: FieldRef, instance: models.Model, digest: str, version: str) -> bool:
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

    With ``force`` every existing row is kept (re-embedding with an unchanged encoder).
    """
    wanted = list(dict.fromkeys(pks))
    version = version or ref.version()
    stats = EmbedStats()
    pending: list[PendingRow] = []
    for instance in _rows_queryset(ref, wanted):
        stats.examined += 1
        text = ref.field.get_source_text(instance)
        digest = text_hash(text)
        if not force and _is_current(ref, instance, digest, version):
            stats.up_to_date += 1
            continue
        pending.append(PendingRow(instance.pk, text, digest))
    stats.missing = len(wanted) - stats.examined
    return pending, stats


def encode_rows(
    ref: FieldRef,
    rows: Sequence[PendingRow],
    batch_size: int | None = None,
    version: str | None = None,
) -> np.ndarray:
    """Encode the rows' texts with the field's encoder: unit vectors, ``(n, dims)`` float32.

    ``version`` picks a version of the encoder (default: the serving one).
    """
    from .encoders import get_encoder

    config = encoder_config(ref.encoder_name)
    return get_encoder(ref.encoder_name, version).encode(
        [row.text for row in rows],
        batch_size=int(batch_size or config["BATCH_SIZE"]),
        normalize=True,
        long_text=config["LONG_TEXT"],
    )


def _vector_literal(vector: np.ndarray) -> str:
    # '.9g' round-trips float32 exactly and keeps the SQL text short.
    return "[" + ",".join(format(x, ".9g") for x in vector.tolist()) + "]"


def write_vectors(
    ref: FieldRef, rows: Sequence[PendingRow], vectors: np.ndarray, version: str | None = None
) -> int:
    """Store ``vectors[i]`` for ``rows[i]`` where the row's text still hashes to ``rows[i].hash``.

    In one transaction: lock the rows (``SELECT ... FOR UPDATE``, pk order), rebuild their text,
    compare hashes, and write the matching ones with one ``UPDATE ... FROM unnest(...)``.
    Returns how many vectors were written; rows edited or deleted since they were read are
    left alone (their own task or the sweep embeds the new text).

    Raises ``VersionChanged`` (and writes nothing) when ``version`` stopped serving because a
    promotion switched versions meanwhile: checked under the switch lock, so no vector of the
    old version lands after the switch.
    """
    if len(rows) != len(vectors):
        raise ValueError(f"{len(rows)} rows but {len(vectors)} vectors.")
    if not rows:
        return 0
    version = version or ref.version()
    by_pk = {row.pk: (row, vector) for row, vector in zip(rows, vectors, strict=True)}
    alias = ref.db_alias
    with transaction.atomic(using=alias):
        _check_still_serving(ref, version, alias)
        still_same = [
            instance.pk
            for instance in _rows_queryset(ref, by_pk, lock=True)
            if text_hash(ref.field.get_source_text(instance)) == by_pk[instance.pk][0].hash
        ]
        if still_same:
            _update_rows(ref, [(pk, *by_pk[pk]) for pk in still_same], version)
    return len(still_same)


class VersionChanged(Exception):
    """The version rows were encoded with stopped serving before they were written."""

    def __init__(self, ref: FieldRef, encoded: str, serving: str) -> None:
        super().__init__(f"{ref}: encoded with {encoded!r} but {serving!r} serves now.")
        self.serving = serving


def _check_still_serving(ref: FieldRef, version: str, alias: str) -> None:
    """Inside the write transaction: hold the switch lock (shared) and re-read the serving
    version. Skipped while no version of the encoder was ever saved (no switch can happen)."""
    from . import versions

    if not (versions.model_root() / ref.encoder_name).is_dir():
        return
    versions.switch_lock(ref.encoder_name, shared=True, using=alias)
    current = versions.serving(ref.encoder_name, max_age=0).version
    if current != version:
        raise VersionChanged(ref, version, current)


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
        [_vector_literal(vector) for _, _, vector in items],
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _chunks(items: Sequence[Pk], size: int) -> Iterator[Sequence[Pk]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def embed_pks(
    ref: FieldRef,
    pks: Iterable[Pk],
    *,
    force: bool = False,
    batch_size: int | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: Progress | None = None,
) -> EmbedStats:
    """Embed rows ``pks`` of one field: skip up-to-date rows, encode in batches, write safely.

    Works through the rows ``chunk_rows`` at a time (read, encode, write, commit), so a worker
    killed part-way keeps what it finished. ``progress(n)`` is called after each chunk.
    """
    from . import promotion

    ordered = list(dict.fromkeys(pks))
    version = ref.version()
    # A version being promoted gets the vectors of rows saved meanwhile too (staged).
    candidate = promotion.promoting_version(ref.encoder_name)
    stats = EmbedStats()
    seconds = {"read": 0.0, "encode": 0.0, "write": 0.0}  # where the time goes (debug log)
    for chunk in _chunks(ordered, max(1, chunk_rows)):
        for _attempt in range(3):
            started = time.perf_counter()
            pending, chunk_stats = read_pending(ref, chunk, force=force, version=version)
            seconds["read"] += time.perf_counter() - started
            if not pending:
                break
            started = time.perf_counter()
            vectors = encode_rows(ref, pending, batch_size, version)
            seconds["encode"] += time.perf_counter() - started
            started = time.perf_counter()
            try:
                written = write_vectors(ref, pending, vectors, version)
            except VersionChanged as exc:
                # A promotion switched versions while this chunk was encoded: redo the chunk
                # with the version that serves now.
                version = exc.serving
                candidate = promotion.promoting_version(ref.encoder_name)
                continue
            seconds["write"] += time.perf_counter() - started
            chunk_stats.embedded = written
            chunk_stats.changed = len(pending) - written
            if candidate is not None and candidate != version:
                promotion.stage_pending(ref, pending, candidate, batch_size)
            break
        stats += chunk_stats
        if progress is not None:
            progress(len(chunk))
    if stats.changed:
        logger.info(
            "%s: %d rows changed while being encoded; left for their own task.", ref, stats.changed
        )
    logger.debug(
        "%s: %d rows embedded, %d up to date; read %.3f s, encode %.3f s, write %.3f s",
        ref,
        stats.embedded,
        stats.up_to_date,
        seconds["read"],
        seconds["encode"],
        seconds["write"],
    )
    return stats


# --- staleness ------------------------------------------------------------------------------


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
    ref: FieldRef, *, chunk_rows: int = 1000, limit: int | None = None
) -> Iterator[list[Pk]]:
    """Yield the primary keys of stale rows, a chunk at a time, in pk order.

    Keyset pagination (``pk > last``) so rows that stay stale (edited again meanwhile) are
    not yielded twice and the walk always ends.
    """
    version = ref.version()
    exact = has_exact_sql_staleness(ref)
    last: Pk | None = None
    yielded = 0
    while limit is None or yielded < limit:
        size = chunk_rows if limit is None else min(chunk_rows, limit - yielded)
        if exact:
            qs = stale_queryset(ref, version)
            if last is not None:
                qs = qs.filter(pk__gt=last)
            pks = list(qs.order_by("pk").values_list("pk", flat=True)[:size])
            if not pks:
                return
            last = pks[-1]
        else:
            pks, last, done = _scan_callable(ref, version, last, size)
            if not pks and done:
                return
        if pks:
            yielded += len(pks)
            yield pks


def _scan_callable(
    ref: FieldRef, version: str, after: Pk | None, size: int
) -> tuple[list[Pk], Pk | None, bool]:
    """Check ``size`` rows after ``after`` in Python; return the stale ones, the last pk seen, and
    whether the table is exhausted."""
    qs = _light_rows(ref, ref.manager.order_by("pk"))
    if after is not None:
        qs = qs.filter(pk__gt=after)
    instances = list(qs[:size])
    stale = [
        obj.pk
        for obj in instances
        if not _is_current(ref, obj, text_hash(ref.field.get_source_text(obj)), version)
    ]
    last = instances[-1].pk if instances else after
    return stale, last, len(instances) < size


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
    )


def embed_stale(
    ref: FieldRef,
    *,
    limit: int | None = None,
    batch_size: int | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: Progress | None = None,
) -> EmbedStats:
    """Find and embed up to ``limit`` stale rows of one field, in the calling process."""
    stats = EmbedStats()
    for pks in iter_stale_pks(ref, chunk_rows=chunk_rows, limit=limit):
        stats += embed_pks(
            ref, pks, batch_size=batch_size, chunk_rows=chunk_rows, progress=progress
        )
    return stats


def check_configured(ref: FieldRef) -> None:
    """Fail early, with a useful message, when the field's encoder is not configured."""
    try:
        encoder_config(ref.encoder_name)
    except ImproperlyConfigured as exc:
        raise ImproperlyConfigured(f"{ref}: {exc}") from exc
