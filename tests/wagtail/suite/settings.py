"""Settings for Wagtail's backend suite (tests/wagtail/suite): the test suite's settings, with
Wagtail's apps, plus modelsearch's test app (the models the suite searches: books, authors,
novels...) and this folder's app (the ``search`` fixture, the command name the suite calls).

``WAGTAILSEARCH_BACKENDS`` names each backend under test: Wagtail's database backend (on
PostgreSQL) and django-sbert's in each mode. The suite looks its backend up by path in
``MODELSEARCH_BACKENDS``; each test class picks its entry (``backends.py``).

``SBERT_SUITE_DATABASE`` names the test database (default: one per process), so that the suite
can run beside a pytest session on the same PostgreSQL server.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, INSTALLED_APPS

if "wagtail.search" not in INSTALLED_APPS:
    raise RuntimeError("Wagtail's backend suite needs Wagtail installed (SBERT_TEST_WAGTAIL=1).")

# The news site of tests/wagtail is left out: its migration is Wagtail 8's (swappable page
# model), and the suite searches only its own models.
INSTALLED_APPS = [
    *(app for app in INSTALLED_APPS if app != "tests.wagtail.newsapp"),
    "modelsearch.test.testapp",
    "tests.wagtail.suite",
]

# The test app's migrations depend on the "modelsearch" app, which is "wagtail.search" in a
# Wagtail site: its tables are made from the models instead.
MIGRATION_MODULES = {"searchtests": None}

_TEST_NAME = os.environ.get("SBERT_SUITE_DATABASE", f"test_wagtail_suite_{os.getpid()}")
DATABASES = {"default": {**DATABASES["default"], "TEST": {"NAME": _TEST_NAME}}}

SBERT_BACKEND = "django_sbert.contrib.wagtail"
WAGTAIL_DATABASE_BACKEND = "wagtail.search.backends.database"

WAGTAILSEARCH_BACKENDS = {
    "default": {"BACKEND": WAGTAIL_DATABASE_BACKEND},
    **{
        mode: {"BACKEND": SBERT_BACKEND, "OPTIONS": {"MODE": mode}, "AUTO_UPDATE": False}
        for mode in ("vector", "hybrid", "keyword")
    },
}
MODELSEARCH_BACKENDS = WAGTAILSEARCH_BACKENDS

# SBERT_SUITE_MODEL=minilm: the real all-MiniLM-L6-v2, under which the tests that differ by
# design are checked for what is right for them (backends.py).
if os.environ.get("SBERT_SUITE_MODEL") == "minilm":
    SBERT = {  # noqa: F405
        **SBERT,  # noqa: F405
        "ENCODERS": {
            "default": {**SBERT["ENCODERS"]["default"], "MODEL": "all-MiniLM-L6-v2"},  # noqa: F405
        },
    }
