"""App configuration: registers system checks and signal handlers when Django starts."""

from __future__ import annotations

import logging
from typing import Any

from django.apps import AppConfig
from django.db import DatabaseError, connections, transaction
from django.db.models.signals import post_migrate, post_save, pre_migrate

logger = logging.getLogger(__name__)


class SbertConfig(AppConfig):
    name = "django_sbert"
    label = "django_sbert"
    verbose_name = "Semantic search (Sentence-BERT)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at the top: they import models, which Django loads after apps.py.
        from . import checks
        from .indexing.signals import connect_signals

        checks.register()
        pre_migrate.connect(create_vector_extension, dispatch_uid="django_sbert.create_extension")
        post_migrate.connect(
            set_keyword_statistics, sender=self, dispatch_uid="django_sbert.keyword_statistics"
        )
        post_migrate.connect(
            install_keyword_triggers, sender=self, dispatch_uid="django_sbert.keyword_triggers"
        )
        connect_signals()
        connect_evaluation()


def connect_evaluation() -> None:
    """Evaluate an encoder's judgment lists after each promotion (evaluation/tasks.py)."""
    # Imported here: they import models, which Django loads after apps.py.
    from .evaluation.tasks import after_promotion
    from .models import EncoderVersion

    post_save.connect(
        after_promotion, sender=EncoderVersion, dispatch_uid="django_sbert.after_promotion"
    )


def create_vector_extension(*, using: str = "default", **kwargs: Any) -> None:
    """Create the pgvector extension before ``migrate`` runs anything.

    Django does not order one app's migrations after another's unless told, so a user's
    migration adding a vector column could run before ``django_sbert.0001``; apps without
    migrations are even synced before any migration. ``pre_migrate`` comes first in both cases.
    """
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        if cursor.fetchone() is not None:
            return
        logger.info("Creating the PostgreSQL extension 'vector' on database %r.", using)
        try:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except DatabaseError as exc:
            # Let migrate go on: django_sbert.0001 fails with the database's own message.
            logger.warning(
                "Could not create the PostgreSQL extension 'vector' on database %r (%s). "
                "Install pgvector on the server and run CREATE EXTENSION vector; as a "
                "superuser, or grant this role CREATE on the database.",
                using,
                exc,
            )


def install_keyword_triggers(*, using: str = "default", **kwargs: Any) -> list[str]:
    """After ``migrate``: the triggers that keep BM25's statistics of every keyword column
    (keyword/statistics.py), replaced idempotently; a column without statistics yet is
    counted. A role that may not create triggers gets a warning, and migrate goes on."""
    from .keyword import statistics  # imports fields, which Django loads after apps.py

    try:
        counted = statistics.install(using)
    except DatabaseError as exc:
        logger.warning(
            "django-sbert: could not install the keyword statistics triggers on database %r "
            "(%s); BM25 keyword search ranks without statistics until `manage.py "
            "sbert_keyword_stats --rebuild` runs as the tables' owner.",
            using,
            exc,
        )
        return []
    if counted:
        logger.info("django-sbert: keyword statistics counted for %s.", ", ".join(counted))
    return counted


# The statistics target PostgreSQL has for a column: NULL (PostgreSQL 17) or -1 (before) means
# default_statistics_target; no row: no such table or column on this database.
# Statistics target migrate gives each keyword column, so ANALYZE counts enough words to weigh
# them (PostgreSQL's default, 100, leaves rare words unweighed).
KEYWORD_STATISTICS: int | None = 1000  # None: leave PostgreSQL's
_STATISTICS_SQL = """
SELECT COALESCE(a.attstattarget, -1) FROM pg_attribute AS a
WHERE a.attrelid = to_regclass(%s) AND a.attname = %s AND NOT a.attisdropped
"""


def set_keyword_statistics(*, using: str = "default", **kwargs: Any) -> list[tuple[str, str]]:
    """Give every keyword column (``EmbeddingField(keyword_search=True)``'s ``<name>_tsv``)
    the statistics target ``KEYWORD_STATISTICS``, after ``migrate``.

    ``keyword_search(match="any")`` weighs each word by how rare it is, read from the lexeme
    frequencies ANALYZE keeps for the column (``pg_stats.most_common_elems``): about ten
    times the statistics target of them. At PostgreSQL's default of 100, only the 1,000
    commonest words are counted, so every rarer word gets one and the same weight; at 1,000,
    SciFact's keyword nDCG@10 went from 65.1 to 67.4 (docs/hybrid.md). The target applies
    from the next ANALYZE (autovacuum's, or run one). ``ALTER COLUMN ... SET STATISTICS``
    takes a lock that lets reads and writes go on. Returns the (table, column) pairs changed.
    """
    # Imported here: fields imports models, which Django loads after apps.py.
    from .fields import all_embedding_fields

    target = KEYWORD_STATISTICS
    connection = connections[using]
    if target is None or connection.vendor != "postgresql":
        return []
    changed = []
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for model, field in all_embedding_fields():
            if not field.keyword_search or model._meta.proxy or not model._meta.managed:
                continue
            table = model._meta.db_table
            column = model._meta.get_field(field.tsvector_field_name).column
            cursor.execute(_STATISTICS_SQL, [quote(table), column])
            row = cursor.fetchone()
            if row is None or row[0] == target:
                continue
            try:
                with transaction.atomic(using=using):  # a failure leaves migrate's work alone
                    cursor.execute(
                        f"ALTER TABLE {quote(table)} ALTER COLUMN {quote(column)} "
                        f"SET STATISTICS {int(target)}"
                    )
            except DatabaseError as exc:  # e.g. a role that does not own the table
                logger.warning(
                    "django-sbert: could not set the statistics target of %s.%s on database "
                    "%r (%s); keyword search weighs words by PostgreSQL's default statistics.",
                    table,
                    column,
                    using,
                    exc,
                )
                continue
            changed.append((table, column))
    if changed:
        logger.info(
            "django-sbert: statistics target %s for keyword columns %s on database %r; it "
            "applies from their next ANALYZE.",
            target,
            ", ".join(f"{t}.{c}" for t, c in changed),
            using,
        )
    return changed
