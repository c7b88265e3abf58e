"""WSGI entry point of the load-test site: ``gunicorn -c benchmarks/load_site/gunicorn.conf.py``."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.load_site.settings")
application = get_wsgi_application()
