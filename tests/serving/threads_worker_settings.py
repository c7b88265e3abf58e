"""Settings of the worker subprocesses in tests/serving/test_worker_threads.py.

``tests.settings`` with ``THREADS`` unset (the worker decides torch's threads), the task that
reports them imported, and a result backend on the broker's Redis to bring the answer back.
"""

from tests.settings import *  # noqa: F403
from tests.settings import CELERY_BROKER_URL
from tests.settings import LOGGING as _LOGGING
from tests.settings import SBERT as _BASE

SBERT = {**_BASE, "ENCODERS": {"default": {**_BASE["ENCODERS"]["default"], "THREADS": None}}}
CELERY_IMPORTS = ["tests.serving.threads_task"]
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
LOGGING = {**_LOGGING, "loggers": {"django_sbert": {"handlers": ["console"], "level": "INFO"}}}
