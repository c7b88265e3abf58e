"""The ASGI test site's settings (``tests.asgi_app``) serving the search pages of
``tests.views.urls``: ``DJANGO_SETTINGS_MODULE=tests.views.asgi_settings uvicorn
tests.asgi_app.asgi:application``."""

from tests.asgi_app.settings import *  # noqa: F403

ROOT_URLCONF = "tests.views.urls"
