"""Settings of the load-test site; every value that differs per process comes from the
environment that ``benchmarks.load`` gives each one.

``DATABASE_URL`` / ``REPLICA_URL``
    The primary and its streaming replica; searches read the replica (``SEARCH["DATABASE"]``).
``CELERY_BROKER_URL``
    Redis (the load test uses database 10).
``SBERT_MODEL``, ``SBERT_MODEL_DIR``, ``SBERT_MODEL_CACHE``
    The base model; where fine-tuned versions are stored (written by the training worker
    only); this process's own cache of verified copies (one per simulated host).
``SBERT_QUERY_SOCKET``
    The host's query server (``benchmarks.throughput``); unset: each process encodes its own.
    Web processes load no model (the light layout) unless ``SBERT_QUERY_FALLBACK=in-process``
    (they encode texts themselves while the server is away: ``benchmarks.memory --layouts``).
``SBERT_PRECISION``, ``SBERT_QUERY_RUNTIME``
    The encoder's ``PRECISION`` and ``QUERY_RUNTIME``; unset: ``"auto"``.
"""

from __future__ import annotations

import os

from benchmarks.django_setup import TEST_APP, database_from_url

SECRET_KEY = "django-sbert-load-test-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "benchmarks.load_site.urls"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_sbert",
    TEST_APP,
    "benchmarks.load_site",
]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]

# Persistent connections: opening one per request costs more than a search.
DATABASES = {
    "default": {**database_from_url(os.environ["DATABASE_URL"]), "CONN_MAX_AGE": 600},
    "replica": {
        **database_from_url(os.environ["REPLICA_URL"]),
        "CONN_MAX_AGE": 600,
        "TEST": {"MIRROR": "default"},
    },
}

SBERT = {
    "ENCODERS": {
        "default": {
            "MODEL": os.environ.get("SBERT_MODEL", "all-MiniLM-L6-v2"),
            "THREADS": int(os.environ.get("SBERT_THREADS", "1")),
            "PRECISION": os.environ.get("SBERT_PRECISION") or "auto",
            "QUERY_RUNTIME": os.environ.get("SBERT_QUERY_RUNTIME") or "auto",
        }
    },
    "MODEL_DIR": os.environ["SBERT_MODEL_DIR"],
    "MODEL_CACHE": os.environ.get("SBERT_MODEL_CACHE") or None,
    "SEARCH": {"DATABASE": "replica"},
    "RATES": {"search": None},  # the load client is one address
    "QUERY_SERVER": {"SOCKET": os.environ.get("SBERT_QUERY_SOCKET") or None},
}
if os.environ.get("SBERT_QUERY_SOCKET") and os.environ.get("SBERT_QUERY_FALLBACK"):
    SBERT["QUERY_SERVER"]["SOCKET"] = [os.environ["SBERT_QUERY_SOCKET"], "in-process"]

CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
CELERY_RESULT_BACKEND = os.environ["CELERY_BROKER_URL"]  # the probe task's answers
CELERY_TASK_IGNORE_RESULT = True  # the indexing tasks write to the database

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_sbert": {"handlers": ["console"], "level": "WARNING"}},
}
