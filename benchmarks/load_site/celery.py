"""The load-test site's Celery app: ``celery -A benchmarks.load_site.celery worker ...``."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.load_site.settings")

app = Celery("load_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
