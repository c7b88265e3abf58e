"""The example site's Django project; its Celery app loads with Django (``celery -A demo_site``)."""

from .celery import app as celery_app

__all__ = ["celery_app"]
