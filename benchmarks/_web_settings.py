"""Settings of the gunicorn site of ``benchmarks.connections`` (``benchmarks._web_settings``).

The test app's models on ``DATABASE_URL``, all-MiniLM-L6-v2, the REST API without rate limits,
and the connection handling ``BENCH_CONNECTIONS`` names: ``per-request`` (Django's default
``CONN_MAX_AGE = 0``), ``persistent`` (``CONN_MAX_AGE = 600``) or ``pool`` (Django's psycopg
pool, ``OPTIONS["pool"]``).
"""

import os

from benchmarks.django_setup import TEST_APP, database_from_url

SECRET_KEY = "django-sbert-benchmark-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["127.0.0.1"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "tests.web_app.urls"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_sbert",
    TEST_APP,
]

_database = database_from_url(os.environ["DATABASE_URL"])
_mode = os.environ.get("BENCH_CONNECTIONS", "per-request")
if _mode == "persistent":
    _database["CONN_MAX_AGE"] = 600
    _database["CONN_HEALTH_CHECKS"] = True
elif _mode == "pool":
    _database["CONN_MAX_AGE"] = 0
    _database["OPTIONS"] = {**_database.get("OPTIONS", {}), "pool": {"min_size": 1, "max_size": 2}}
else:
    _database["CONN_MAX_AGE"] = 0
DATABASES = {"default": _database}

SBERT = {
    "ENCODERS": {"default": {"MODEL": "all-MiniLM-L6-v2"}},
    "AUTO_EMBED": False,
    "RATES": {"search": None, "embed": None, "schema": None},
}
CELERY_TASK_ALWAYS_EAGER = True  # nothing is queued: the benchmark only searches
LOGGING = {  # the benchmark waits for each process's "web process warmed" line
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_sbert": {"handlers": ["console"], "level": "INFO"}},
}
