"""WSGI entry point: ``gunicorn demo_site.wsgi`` (from ``example_project/``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")
application = get_wsgi_application()
