"""Settings of the gunicorn test site: one web host of a multi-host site (``tests.host_settings``:
the model storage and this host's cache from the environment) with its own URLs, no rate
limits, and django-sbert's INFO logs on the console (the tests read what the processes did).
``SBERT_TEST_DB_POOL=1`` connects through Django's psycopg pool; ``SBERT_TEST_QUERY_SOCKET``
makes it the light layout (the host's query server on that socket, the search log on)."""

import os

from tests.host_settings import *  # noqa: F403
from tests.host_settings import DATABASES as _DATABASES
from tests.host_settings import SBERT as _BASE

ROOT_URLCONF = "tests.web_app.urls"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
SBERT = {
    **_BASE,
    "RATES": {"search": None, "embed": None, "schema": None, "health": None},
    # The tests read every check's reason and the pid, as monitoring does with its token.
    "HEALTH": {"TOKEN": "web-app-health-token-for-tests"},
}
if os.environ.get("SBERT_TEST_QUERY_SOCKET"):  # the light layout: no model in web processes
    SBERT["QUERY_SERVER"] = {"SOCKET": os.environ["SBERT_TEST_QUERY_SOCKET"]}
    SBERT["FEEDBACK"] = {"LOG": True}
    SBERT["RATES"] = {**SBERT["RATES"], "logging": None}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_sbert": {"handlers": ["console"], "level": "INFO"}},
}

if os.environ.get(
    "SBERT_TEST_DB_POOL"
):  # Django's psycopg pool instead of a connection per request
    _default = _DATABASES["default"]
    _options = {**_default.get("OPTIONS", {}), "pool": {"min_size": 1, "max_size": 2}}
    DATABASES = {"default": {**_default, "CONN_MAX_AGE": 0, "OPTIONS": _options}}
