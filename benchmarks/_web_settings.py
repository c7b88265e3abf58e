"""Settings of the gunicorn site of ``benchmarks/connections.py`` (``--pythonpath benchmarks``).

The test app's models on ``DATABASE_URL``, all-MiniLM-L6-v2, the REST API without rate limits,
and the connection handling ``BENCH_CONNECTIONS`` names: ``per-request`` (Django's default
``CONN_MAX_AGE = 0``), ``persistent`` (``CONN_MAX_AGE = 600``) or ``pool`` (Django's psycopg
pool, ``OPTIONS["pool"]``).
"""

import os
import sys
from pathlib import Path

import dj_database_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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
    "tests.testapp",
]

_database = dict(dj_database_url.parse(os.environ["DATABASE_URL"]))
_socket_dir = _database.get("OPTIONS", {}).pop("host", None)  # pgserver's ?host=/socket/dir
if _socket_dir and not _database["HOST"]:
    _database["HOST"] = _socket_dir
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
    "API": {"THROTTLE_RATES": {"search": None, "embed": None, "schema": None}},
}
CELERY_TASK_ALWAYS_EAGER = True  # nothing is queued: the benchmark only searches
LOGGING = {  # the benchmark waits for each process's "web process warmed" line
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_sbert": {"handlers": ["console"], "level": "INFO"}},
}
