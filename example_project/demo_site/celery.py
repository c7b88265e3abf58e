"""The Celery app of the example site: ``celery -A demo_site worker -Q sbert --pool solo``.

Configuration comes from Django settings (``CELERY_*``), as in any Django project.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")

app = Celery("demo_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
