"""Which version of an encoder serves now: the database says, every host obeys.

The *serving* version of an encoder is its active ``EncoderVersion``, or, when none is active,
the model named in ``SBERT["ENCODERS"][name]["MODEL"]``. Its version string is what indexing
writes to ``<field>_version`` and what a query must filter on::

    serving_record("default")   # Serving(encoder, version, directory), cached for a moment
    serving_version("default")  # just the version string

The database is the only source of truth: a host never decides from its own files which version
serves. When the serving version's files are missing on a host, loading it raises
``VersionUnavailable`` instead of encoding with another version (check ``django_sbert.E012``).

Each process trusts what it read for ``SBERT["VERSION_CACHE_SECONDS"]`` (2 s), so every process
notices a promotion within 2 s without a restart; while a promotion is under way nothing is
cached, so the switch is seen at the very next query (docs/fine-tuning.md).

Writers that must not race a switch (``indexing.writes.write_vectors``) hold
``switch_lock(name, shared=True)`` and check ``serving_record(name, max_age=0)`` inside it; the
switch holds the same lock exclusively (``finetuning.promotion.switch``).

Which database answers: the primary (``router.db_for_write(EncoderVersion)``) unless the caller
names one. A search reads the version from the database its rows come from
(``serving_record(name, using=queryset.db)``), so a lagging replica answers with its own
version and its own rows, never zero rows because the primary moved on (docs/deployment.md,
"Read replicas"). The cache is kept per (database, encoder).

Version identity (``base_version``, fingerprints) is in ``identity.py``; where the files of
fine-tuned versions live is in ``storage.py``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.core.signals import setting_changed
from django.db import ProgrammingError, connections, router, transaction

from ..conf import SETTING_NAME, sbert_settings
from ..models import EncoderVersion, VersionStatus
from .identity import base_version

logger = logging.getLogger(__name__)

UNDEFINED_TABLE = "42P01"  # PostgreSQL's SQLSTATE for a relation that does not exist

# hybrid_search()'s fusions (query/fusion.py): reciprocal rank fusion, or a weighted sum of
# the two sides' normalised scores.
FUSIONS = ("rrf", "linear")
# The fusion of hybrid_search() chosen for a version on its eval split, stored in its metrics
# as "fusion_<key>" (finetuning/hybrid.py chooses it); "fusion_method" is one of FUSIONS
# (versions stored before it was chosen have none: "rrf").
FUSION_KEYS = ("rrf_k", "vector_weight", "keyword_weight")

_lock = threading.Lock()
_cache: dict[tuple[str, str], tuple[float, Serving]] = {}  # (alias, encoder) -> (read at, value)
# Version -> the manifest digest its row records ("" none), as last read here: a fetch checks
# the storage's manifest against it without reading the database (model_cache.py).
_digests: dict[str, str] = {}


@dataclass(frozen=True)
class Serving:
    """The version serving one encoder: its version string and its model directory."""

    encoder: str
    version: str
    # Storage key of a fine-tuned version's files (model_cache fetches them), or an absolute
    # local directory for rows saved before SBERT["MODEL_STORAGE"]; None: the settings' model.
    directory: str | None
    # (rrf_k, vector_weight, keyword_weight, method) chosen for this version on its eval
    # split; None: none was (the base model, a run without positive eval pairs), and
    # SBERT["SEARCH"] applies.
    fusion: tuple[float, float, float, str] | None = None

    @property
    def is_base(self) -> bool:
        return self.directory is None

    def fusion_settings(self) -> dict[str, Any]:
        """``fusion`` as hybrid_search()'s keyword arguments (``fusion``, ``rrf_k``,
        ``vector_weight``, ``keyword_weight``); {} when none was chosen."""
        if not self.fusion:
            return {}
        *numbers, method = self.fusion
        return {"fusion": method, **dict(zip(FUSION_KEYS, numbers, strict=True))}


def stored_fusion(
    values: Sequence[Any], method: Any = None
) -> tuple[float, float, float, str] | None:
    """The fusion from a version's metrics: ``fusion_<key>`` values in ``FUSION_KEYS`` order
    and ``fusion_method`` (None: "rrf", as stored before linear fusion existed); None when a
    value is missing or not a number, or the method is unknown."""
    try:
        rrf_k, vector, keyword = (float(value) for value in values)
    except (TypeError, ValueError):
        return None
    method = "rrf" if method is None else method
    if method not in FUSIONS:
        return None
    return rrf_k, vector, keyword, method


def _db(using: str | None = None) -> str:
    """``using``, or the primary: the database the switch writes and writers lock on."""
    return using or router.db_for_write(EncoderVersion)


def _read_active(name: str, alias: str) -> tuple[tuple[Any, ...] | None, bool]:
    """(version, directory, is_base, fusion) of the active version or None, and whether a
    version of the encoder is being promoted; one indexed query on database ``alias``."""
    qs = EncoderVersion.objects.using(alias).filter(
        encoder_name=name, status__in=[VersionStatus.ACTIVE, VersionStatus.PROMOTING]
    )
    # The fusion's four keys, not all metrics.
    fusion = [f"metrics__fusion_{key}" for key in (*FUSION_KEYS, "method")]
    fields = ("version", "directory", "is_base", "status", *fusion, "manifest_sha256")
    try:
        if connections[alias].in_atomic_block:
            # In a caller's transaction (a data migration, a test), a failing lookup must not
            # break that transaction: isolate it in a savepoint.
            with transaction.atomic(using=alias):
                rows = list(qs.values_list(*fields))
        else:
            rows = list(qs.values_list(*fields))
    except ProgrammingError as exc:
        if _sqlstate(exc) != UNDEFINED_TABLE:
            raise
        # django_sbert's tables are not migrated yet (rows saved by an earlier migration):
        # no version can be active before the table that records versions exists.
        return None, False
    for row in rows:
        _digests[row[0]] = row[8]
    active = next(
        (
            (*row[:3], stored_fusion(row[4:7], row[7]))
            for row in rows
            if row[3] == VersionStatus.ACTIVE
        ),
        None,
    )
    return active, any(row[3] == VersionStatus.PROMOTING for row in rows)


def _sqlstate(exc: BaseException) -> str | None:
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)


def serving_record(
    name: str = "default", *, max_age: float | None = None, using: str | None = None
) -> Serving:
    """The ``Serving`` record of encoder ``name``: its serving version, read from the database at
    most every ``max_age`` seconds (default ``SBERT["VERSION_CACHE_SECONDS"]``).

    ``using``: the database to read it from (a search passes the one its rows come from);
    default the primary, ``router.db_for_write(EncoderVersion)``.

    ``max_age=0`` always reads the database (writers check this way under the switch lock).
    While a version of the encoder is being promoted the answer is not cached at all, so that
    every process sees the switch at its next use (``promotion.run_promotion`` waits at least
    ``VERSION_CACHE_SECONDS`` after the promotion began before switching).
    """
    ttl = float(sbert_settings.VERSION_CACHE_SECONDS if max_age is None else max_age)
    key = (_db(using), name)
    now = time.monotonic()
    hit = _cache.get(key)
    if hit is not None and ttl > 0 and now - hit[0] < ttl:
        return hit[1]
    row, promoting = _read_active(name, key[0])
    if row is None:
        value = Serving(name, base_version(name), None)
    elif row[2]:  # the settings' model, back in service: a fusion only if one was stored on it
        value = Serving(name, base_version(name), None, row[3])
    else:
        value = Serving(name, row[0], row[1], row[3])
    with _lock:
        if promoting:
            _cache.pop(key, None)
        else:
            _cache[key] = (now, value)
    return value


def serving_version(name: str = "default", using: str | None = None) -> str:
    """The version string that rows encoded by the serving model carry in ``<field>_version``."""
    return serving_record(name, using=using).version


def serving_changed(name: str, version: str, using: str | None = None) -> str | None:
    """Re-read the serving version now; return it if it is no longer ``version``, else None.

    For a search that encoded its text with a cached ``version`` and found nothing: if a
    promotion switched meanwhile, encode again with the returned version and retry. ``using``:
    the search's database.
    """
    current = serving_record(name, max_age=0, using=using).version
    return current if current != version else None


def forget_serving(name: str | None = None) -> None:
    """Drop this process's cached serving version(s), on every database: the next call reads
    the database."""
    with _lock:
        for key in [key for key in _cache if name is None or key[1] == name]:
            del _cache[key]


def version_directory(name: str, version: str) -> str | None:
    """Storage key of ``version`` of encoder ``name`` (see ``Serving.directory``); None for the
    settings' model."""
    if version == base_version(name):
        return None
    row = (
        EncoderVersion.objects.using(_db())
        .filter(encoder_name=name, version=version)
        .values_list("directory", "is_base", "manifest_sha256")
        .first()
    )
    if row is None:
        raise LookupError(f"Encoder {name!r} has no version {version!r}.")
    _digests[version] = row[2]
    return None if row[1] else row[0]


def recorded_manifest_digest(version: str) -> str | None:
    """The manifest digest the database records for ``version`` ("" none recorded), as this
    process last read it with the version (``serving_record``, ``version_directory``); None
    when it has not read that version's row. Reads no database."""
    return _digests.get(version)


def promoting_version(name: str) -> str | None:
    """The version string of encoder ``name`` being promoted now, if any (one indexed query)."""
    return (
        EncoderVersion.objects.using(_db())
        .filter(encoder_name=name, status=VersionStatus.PROMOTING)
        .values_list("version", flat=True)
        .first()
    )


# --- the switch lock -------------------------------------------------------------------------


def _lock_key(name: str) -> int:
    digest = hashlib.sha256(f"django_sbert.switch:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def switch_lock(name: str, *, shared: bool, using: str) -> None:
    """Take the transaction-level advisory lock that orders vector writes and switches.

    Call inside ``transaction.atomic``; released at COMMIT or ROLLBACK.
    """
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s)", [_lock_key(name)])


def _on_setting_changed(*, setting: str, **kwargs: object) -> None:
    if setting == SETTING_NAME:
        forget_serving()


setting_changed.connect(_on_setting_changed, dispatch_uid="django_sbert.serving.versions.reset")
