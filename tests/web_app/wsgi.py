"""``gunicorn -c tests/web_app/gunicorn.conf.py tests.web_app.wsgi``."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.web_app.settings")
application = get_wsgi_application()
