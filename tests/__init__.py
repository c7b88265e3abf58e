# The suite is a Django project: load its Celery app here, as a project's __init__.py does,
# so every test publishes through it (not through Celery's default AMQP app).
from .celery_app import app as celery_app

__all__ = ["celery_app"]
