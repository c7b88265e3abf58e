"""Settings of the worker subprocess in tests/serving/test_worker_warm_up.py.

``tests.settings`` with the encoder compiled (so the worker's warm-up takes seconds, long
enough for a waiting task to arrive during it) and django-sbert's INFO lines in the log.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import LOGGING as _LOGGING
from tests.settings import SBERT as _BASE

SBERT = {
    **_BASE,
    "QUEUE": os.environ["SBERT_TEST_QUEUE"],
    "ENCODERS": {"default": {**_BASE["ENCODERS"]["default"], "COMPILE": True}},
}
LOGGING = {
    **_LOGGING,
    "loggers": {"django_sbert": {"handlers": ["console"], "level": "INFO"}},
}
