"""Settings of a process that stands for one host of a multi-host site (subprocesses of tests).

``tests.settings`` plus the model storage the training side writes, this host's own model
cache and the queues, all handed over in the environment (a subprocess does not see
``override_settings``):

* ``SBERT_TEST_STORAGE_BACKEND`` / ``SBERT_TEST_STORAGE_OPTIONS`` (JSON):
  ``STORAGES["sbert_models"]``
* ``SBERT_TEST_MODEL_CACHE``: ``SBERT["MODEL_CACHE"]``, one directory per host
* ``SBERT_TEST_QUEUE`` / ``SBERT_TEST_TRAINING_QUEUE`` (optional): the Celery queues
"""

import json
import os

from django.conf import global_settings

from tests.settings import *  # noqa: F403
from tests.settings import SBERT as _BASE

STORAGES = {
    **global_settings.STORAGES,
    "sbert_models": {
        "BACKEND": os.environ.get(
            "SBERT_TEST_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage"
        ),
        "OPTIONS": json.loads(os.environ["SBERT_TEST_STORAGE_OPTIONS"]),
    },
}

SBERT = {
    **_BASE,
    "MODEL_STORAGE": "sbert_models",
    "MODEL_CACHE": os.environ["SBERT_TEST_MODEL_CACHE"],
    "VERSION_CACHE_SECONDS": float(os.environ.get("SBERT_TEST_VERSION_CACHE_SECONDS", "2")),
}
if os.environ.get("SBERT_TEST_QUEUE"):
    SBERT["QUEUE"] = os.environ["SBERT_TEST_QUEUE"]
if os.environ.get("SBERT_TEST_TRAINING_QUEUE"):
    SBERT["TRAINING"] = {"QUEUE": os.environ["SBERT_TEST_TRAINING_QUEUE"]}
