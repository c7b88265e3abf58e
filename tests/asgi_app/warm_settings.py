"""Settings of the ASGI test site served with ``warm_asgi``: the tiny encoder compiled, with its
compile cache in ``SBERT_TEST_COMPILE_CACHE`` (empty: a new host), and django-sbert's INFO
lines in the log, which say when the query graph was built and when the process was warm."""

import os

from tests.asgi_app.settings import *  # noqa: F403
from tests.asgi_app.settings import LOGGING as _LOGGING
from tests.asgi_app.settings import SBERT as _BASE

SBERT = {
    **_BASE,
    "ENCODERS": {"default": {**_BASE["ENCODERS"]["default"], "COMPILE": True}},
    "COMPILE_CACHE": os.environ["SBERT_TEST_COMPILE_CACHE"],
}
LOGGING = {
    **_LOGGING,
    "loggers": {
        "django_sbert": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
