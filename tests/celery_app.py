"""The Celery app of the test suite and of worker subprocesses started by tests.

Run a worker against the test database the way the tests do::

    DJANGO_SETTINGS_MODULE=tests.settings DATABASE_URL=postgresql://.../test_db \\
        celery -A tests.celery_app worker -Q sbert -P prefork -c 1

Configuration comes from Django settings (``CELERY_*``), as in a real project.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

app = Celery("django_sbert_tests")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
