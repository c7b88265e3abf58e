"""App configuration: registers system checks and signal handlers when Django starts."""

from __future__ import annotations

import logging
from typing import Any

from django.apps import AppConfig
from django.db import DatabaseError, connections
from django.db.models.signals import pre_migrate

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
        connect_signals()


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
