"""Settings of the ASGI test site: ``tests.settings`` (the test database through
``DATABASE_URL``, the tiny encoder through ``SBERT_TEST_MODEL_DIR``) with its own URLs and no
rate limits, so that a burst of concurrent searches is answered, not throttled."""

from tests.settings import *  # noqa: F403
from tests.settings import SBERT as _BASE

ROOT_URLCONF = "tests.asgi_app.urls"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
SBERT = {**_BASE, "RATES": {"search": None, "embed": None, "schema": None}}
